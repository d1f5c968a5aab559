"""The profile CSV (perf/profiles.py): reading the dataset layout and the batch-sweep layout, errors that name
file, line and field, and the writer's round trip."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from wattsched.core.errors import InputError, WattschedError
from wattsched.perf.profiles import PROFILE_COLUMNS, load_profiles, write_rows

FIXTURES = Path(__file__).parent.parent / "fixtures" / "profiles"
HEADER = ",".join(PROFILE_COLUMNS)


def test_solo_windows_are_averaged_and_sets_kept():
    p = load_profiles([FIXTURES / "pair.csv"])
    alpha = p.solo("H200", "alpha")
    assert alpha.it_per_s == pytest.approx(101.0)  # two repeats: 100 and 102
    assert alpha.power_w == pytest.approx(490.0)
    assert alpha.utilisation == pytest.approx(0.95)
    assert alpha.windows == 2 and alpha.spread == pytest.approx(2 / 101)
    assert alpha.memory_gib == 2.0  # from pair-device.json
    assert alpha.source == "pair.csv:2,6"
    (pair,) = p.sets
    assert pair.members == (("alpha", 32), ("beta", 64))
    assert pair.it_per_s == (45.0, 18.0) and pair.power_w == 530.0
    assert p.held_w("H200") == 150.0 and p.bare_w("H200") == 80.0


def test_batch_lookup_and_unknown_model():
    p = load_profiles([FIXTURES / "pair.csv"])
    assert p.solo("H200", "beta", 64).batch == 64
    assert p.solo("H200", "beta", 128) is None  # the batch is not covered
    assert p.solo("H200", "Beta").batch == 64  # names are normalised
    assert p.solo("A100", "beta") is None


def test_batch_sweep_layout_gives_idle_and_held_readings():
    p = load_profiles([FIXTURES / "sweep.csv"], default_gpu="H200")
    assert p.solo("H200", "alpha", 32).power_w == 500.0
    assert p.solo("H200", "alpha").memory_gib == 2.5
    assert p.held_idle_w["H200"] == [140.0, 120.0]
    assert p.bare_w("H200") == 80.0


def test_batch_sweep_without_gpu_is_an_error_naming_the_column():
    with pytest.raises(InputError) as err:
        load_profiles([FIXTURES / "sweep.csv"])
    assert err.value.line == 1 and err.value.field == "gpu"


@pytest.mark.parametrize(
    ("row", "field", "fragment"),
    [
        ("H200,r,a,1,0,a,8,1,1,fast,1,1,100,1,50,1,1", "it_per_s", "not a number"),
        ("H200,r,a,1,0,a,8,1,1,0,1,1,100,1,50,1,1", "it_per_s", "> 0"),
        ("H200,r,a,1,0,a,8,1,1,5,1,1,100,1,150,1,1", "util_gpu_mean_pct", "percentage"),
        ("H200,r,a,1,0,a,8,1,1,5,1,1,-3,1,50,1,1", "gpu_power_mean_w", ">= 0"),
        ("H200,r,a,1,0,,8,1,1,5,1,1,100,1,50,1,1", "model", "empty"),
    ],
)
def test_bad_cells_name_file_line_and_field(tmp_path, row, field, fragment):
    path = tmp_path / "bad.csv"
    path.write_text(f"{HEADER}\nH200,r,ok,1,0,ok,8,1,1,5,1,1,100,1,50,1,1\n{row}\n")
    with pytest.raises(InputError) as err:
        load_profiles([path])
    assert err.value.path == str(path) and err.value.line == 3 and err.value.field == field
    assert fragment in str(err.value)


def test_missing_column_and_short_set_are_errors(tmp_path):
    path = tmp_path / "cols.csv"
    path.write_text("gpu,model,batch,it_per_s\nH200,a,8,5\n")
    with pytest.raises(InputError, match="missing column"):
        load_profiles([path])
    short = tmp_path / "short.csv"
    short.write_text(f"{HEADER}\nH200,r,a+b,2,0,a,8,1,1,5,1,1,100,1,50,1,1\n")
    with pytest.raises(InputError) as err:
        load_profiles([short])
    assert err.value.field == "jobs_in_set" and "has 1 rows" in str(err.value)


def test_power_from_energy_when_mean_is_empty(tmp_path):
    path = tmp_path / "energy.csv"
    path.write_text(f"{HEADER}\nH200,r,a,1,0,a,8,1,1,5,10,2500,,1,50,1,1\n")
    assert load_profiles([path]).solo("H200", "a").power_w == 250.0


def test_two_regimes_of_one_model_are_ambiguous(tmp_path):
    other = tmp_path / "other.csv"
    other.write_text(f"{HEADER}\nH200,input-bound,alpha,1,0,alpha,32,1,1,5,1,1,150,1,5,1,1\n")
    p = load_profiles([FIXTURES / "pair.csv", other])
    with pytest.raises(WattschedError, match="regimes gpu-bound, input-bound"):
        p.solo("H200", "alpha")
    assert p.solo("H200", "alpha", regime="input-bound").power_w == 150.0


def test_missing_file_is_a_clear_error():
    from wattsched.core.errors import DataNotFoundError

    with pytest.raises(DataNotFoundError, match=r"nowhere\.csv"):
        load_profiles(["nowhere.csv"])


def test_writer_round_trips_and_appends(tmp_path):
    out = tmp_path / "written.csv"
    row = {"gpu": "H200", "regime": "gpu-bound", "set": "a", "jobs_in_set": 1, "repeat": 0, "model": "a",
           "batch": 8, "it_per_s": 12.5, "window_s": 4.0, "gpu_energy_j": 1600.0, "gpu_power_mean_w": 400.0,
           "util_gpu_mean_pct": 90.0, "source": "test"}  # fmt: skip
    assert write_rows(out, [row]) == 1
    idle = {"gpu": "H200", "state": "idle-held", "gpu_power_mean_w": 140.0}
    write_rows(out, [idle], append=True)
    p = load_profiles([out])
    assert p.solo("H200", "a").it_per_s == 12.5
    assert p.held_w("H200") == 140.0
    foreign = tmp_path / "foreign.csv"
    shutil.copy(FIXTURES / "pair.csv", foreign)
    with pytest.raises(InputError, match="not a wattsched profile file"):
        write_rows(foreign, [row], append=True)
