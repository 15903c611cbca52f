"""Fixtures of the method tests: the personalized setting's data (``simkit.personal_config``: digits, 2 classes per
client, local test splits), loaded once per module. A module that defines its own ``data`` (``baselines_kit``'s
FedLAMA-setting data) uses that one instead."""

import pytest

from fedcli.data.setup import load_data_and_partition
from simkit import personal_config


@pytest.fixture(scope="module")
def data():
    return load_data_and_partition(personal_config())
