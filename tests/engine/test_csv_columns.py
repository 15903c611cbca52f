"""A run's append-only CSV reopened by a newer fedcli whose columns grew (system.csv's ``wait_s``)."""

from fedcli.results.rundir import SYSTEM_COLUMNS, AppendCSV, read_rows


def test_a_system_csv_begun_without_wait_s_goes_on_with_its_own_header(tmp_path):
    """A --system run begun before system.csv had ``wait_s`` and resumed since appended rows one field longer than its
    header, which the reader refuses as a damaged file: the rows go on with the file's own columns."""
    old = SYSTEM_COLUMNS[: SYSTEM_COLUMNS.index("wait_s")]
    path = tmp_path / "system.csv"
    path.write_text(",".join(old) + "\n" + ",".join(["1", "5", "0.5", "0.5", "4", "4", "0", "0", "0", "", ""]) + "\n")
    f = AppendCSV(path, SYSTEM_COLUMNS)
    f.append(
        [
            {
                "round": 2,
                "iteration": 10,
                "round_s": 0.25,
                "sim_time_s": 0.75,
                "sampled": 4,
                "participants": 3,
                "unavailable": 1,
                "dropped": 0,
                "partial": 0,
                "dropped_clients": "",
                "partial_clients": "",
                "wait_s": 0.0,
            }
        ]
    )
    f.close()
    rows = read_rows(path)
    assert [r["round"] for r in rows] == ["1", "2"] and rows[1]["sim_time_s"] == "0.75"
    assert all(len(line.split(",")) == len(old) for line in path.read_text().splitlines())


def test_a_new_file_and_a_current_file_keep_every_column(tmp_path):
    f = AppendCSV(tmp_path / "system.csv", SYSTEM_COLUMNS)
    f.close()
    g = AppendCSV(tmp_path / "system.csv", SYSTEM_COLUMNS)
    assert g.columns == SYSTEM_COLUMNS
    g.close()
    assert (tmp_path / "system.csv").read_text().splitlines() == [",".join(SYSTEM_COLUMNS)]
