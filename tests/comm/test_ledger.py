"""The ledger's whole-model extra bytes (``Ledger.record_copies``), by hand."""

from fedcli.comm.ledger import Ledger


def test_record_copies_adds_copies_times_numel_times_bytes_to_every_layer():
    led = Ledger([10, 3])
    led.record_sync(0, 2, 32.0)  # 2 clients * 10 * (32 + 32) / 8 = 160 bytes, one sync
    led.record_copies(5)  # 5 * 10 * 4 = 200 and 5 * 3 * 4 = 60
    led.record_copies(2, bytes_per_element=1.0)  # 20 and 6
    assert led.bytes_ == [380.0, 66.0] and led.bytes == 446.0
    assert led.params == 10 and led.syncs == [1, 0]  # extra bytes are not Eq. 8's synchronizations


def test_record_transfer_counts_every_client_and_keeps_one_clients_round_for_the_time():
    led = Ledger([10, 3])
    led.record_transfer(4, down=1)  # 4 clients x 1 copy: 160 and 48 bytes; one client's 40 and 12 down
    led.record_transfer(4, up=1, down=2)  # 4 x 3 copies: 480 and 144; one client's 40 and 12 up, 80 and 24 down
    assert led.bytes_ == [640.0, 192.0]  # what record_copies(4 x 4) records
    assert led.take_round() == ([40.0, 12.0], [120.0, 36.0])
    assert led.take_round() == ([0.0, 0.0], [0.0, 0.0])  # counted afresh after each round
    assert led.bytes_ == [640.0, 192.0] and led.syncs == [0, 0]
