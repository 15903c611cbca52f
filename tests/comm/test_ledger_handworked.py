"""The communication ledger with numbers worked out by hand: per-layer syncs and parameters (FedLAMA Eq. 8's
count), bytes of each synchronization (up- and downlink bits per element for every client), extra traffic, and
FedAvg's communication at the same point of training (the 100% of ``comm X% of FedAvg``)."""

from fedcli.comm.ledger import Ledger, fedavg_params, fedavg_params_so_far


def test_syncs_params_and_bytes():
    led = Ledger([10, 3])
    led.record_sync(0, 4, 32.0)  # 4 clients x 10 elements x (32 up + 32 down) bits = 320 bytes
    led.record_sync(0, 4, 32.0)
    led.record_sync(1, 4, 8.0)  # quantized uplink: 4 x 3 x (8 + 32) / 8 = 60 bytes
    assert led.syncs == [2, 1] and [led.layer_params(l) for l in (0, 1)] == [20, 3] and led.params == 23
    assert led.bytes_ == [640.0, 60.0] and led.bytes == 700.0
    led.extra(100.0)  # traffic of no layer
    led.record_bytes(1, 5.0)  # a layer's traffic outside its syncs: bytes, not syncs
    led.record_copies(2, 4.0)  # two whole-model float32 copies: 2 x 10 x 4 and 2 x 3 x 4 bytes
    assert led.syncs == [2, 1] and led.params == 23
    assert led.bytes_ == [720.0, 89.0] and led.bytes == 909.0
    again = Ledger.from_state(led.state_dict())
    assert (again.numel, again.syncs, again.bytes_, again.extra_bytes, again.bytes) == (
        [10, 3],
        [2, 1],
        [720.0, 89.0],
        100.0,
        909.0,
    )


def test_fedavg_reference_so_far():
    # 100 parameters, tau = 2: after 7 local iterations FedAvg has synchronized 3 times (7 // 2)
    assert fedavg_params(100, 7, 2) == 300
    assert fedavg_params_so_far(100, 7, 5, 2) == 300  # by default: per tau iterations, whatever the rounds
    # one local phase per round (--local-epochs): once per round done, 5 rounds
    assert fedavg_params_so_far(100, 7, 5, 2, per_round=True) == 500
