"""The ledger's whole-model extra bytes (``Ledger.record_copies``), by hand."""

from fedcli.comm.ledger import Ledger


def test_record_copies_adds_copies_times_numel_times_bytes_to_every_layer():
    led = Ledger([10, 3])
    led.record_sync(0, 2, 32.0)             # 2 clients * 10 * (32 + 32) / 8 = 160 bytes, one sync
    led.record_copies(5)                     # 5 * 10 * 4 = 200 and 5 * 3 * 4 = 60
    led.record_copies(2, bytes_per_element=1.0)  # 20 and 6
    assert led.bytes_ == [380.0, 66.0] and led.bytes == 446.0
    assert led.params == 10 and led.syncs == [1, 0]  # extra bytes are not Eq. 8's synchronizations
