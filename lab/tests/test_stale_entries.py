"""lab/stale_entries.py on a file built here: the tests of entries blessed by another speedgate, once each."""

from __future__ import annotations

import json

from lab import stale_entries


def test_the_tests_of_entries_of_another_version_once_each(tmp_path, capsys) -> None:
    old, new = {"software": {"pytest-speedgate": "0.1.0"}}, {"software": {"pytest-speedgate": "0.2.0"}}
    doc = {"cases": {"perftests/test_a.py::test_x[1]::vs_eager": old, "perftests/test_a.py::test_x[1]::vs_compile": old,
                     "perftests/test_a.py::test_y": new, "perftests/test_b.py::test_z[big-2]": {"software": {}}},
           "metrics": {"perftests/test_a.py::test_y::compile_s": {"value": 1.0}}}
    tests, versions = stale_entries.stale(doc, "0.2.0")
    assert tests == ["perftests/test_a.py::test_x[1]", "perftests/test_b.py::test_z[big-2]"]
    assert versions == {"0.1.0": 2, "0.2.0": 1, "unrecorded": 1}
    path = tmp_path / "kind.json"
    path.write_text(json.dumps(doc))
    stale_entries.main([str(path), "--version", "0.2.0"])
    assert capsys.readouterr().out.split() == tests
    stale_entries.main([str(path), "--version", "0.2.0", "--count"])
    assert "4 case entries (2 by 0.1.0, 1 by 0.2.0, 1 by unrecorded); 2 tests to bless again" in capsys.readouterr().out
