"""A part's ``keeps`` on resume (``fedcli.fl.parts.Part.load_state_dict``, issue 60): an attribute the checkpoint lacks
keeps its initial value, and the attributes after it are still restored. Found by mutation testing: the loop's
``continue`` read as ``break`` passed every other test (each checkpoint they load holds all the attributes)."""

from fedcli.fl.parts import Part


def test_an_attribute_the_checkpoint_lacks_keeps_its_value_and_the_later_ones_are_restored():
    class Two(Part):
        keeps = ("d", "intervals")  # a checkpoint written before d was kept holds the intervals alone

    part = Two.__new__(Two)
    part.d, part.intervals = [0.0, 0.0], [2, 2]
    part.load_state_dict({"intervals": [2, 6]})
    assert part.d == [0.0, 0.0] and part.intervals == [2, 6]
