"""``speculab._npz``: the sizes an ``.npz`` archive's headers claim, checked before numpy allocates them."""

import io
import zipfile

import numpy as np
import pytest

from speculab import _npz
from speculab.theory import MarkovInstance


def _claiming(src, dst, name: str, shape: tuple) -> None:
    """A copy of the archive ``src`` whose member ``name`` claims ``shape`` in its header, its data unchanged."""
    with zipfile.ZipFile(src) as old, zipfile.ZipFile(dst, "w") as new:
        for info in old.infolist():
            data = old.read(info)
            if info.filename == f"{name}.npy":
                buf = io.BytesIO(data)
                assert np.lib.format.read_magic(buf) == (1, 0)
                _, fortran, dtype = np.lib.format.read_array_header_1_0(buf)
                header = io.BytesIO()
                np.lib.format.write_array_header_1_0(
                    header, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": fortran, "shape": shape}
                )
                data = header.getvalue() + data[buf.tell() :]
            new.writestr(info.filename, data)


def test_a_header_that_claims_more_than_the_file_holds_is_refused_naming_file_and_array(tmp_path):
    """An instance file whose header claims 800 GB got numpy's MemoryError and the advice "use a smaller --T or
    --V"; the claim is now held against the member's length before anything is allocated."""
    MarkovInstance.random(3, 3, 0).save(tmp_path / "ok.npz")
    _claiming(tmp_path / "ok.npz", tmp_path / "big.npz", "P", (100_000, 1000, 1000))
    _claiming(tmp_path / "ok.npz", tmp_path / "short.npz", "Q", (2, 3, 3))
    with pytest.raises(ValueError, match=r"big.npz: its array P claims shape \(100000, 1000, 1000\) of float64 "):
        MarkovInstance.load(tmp_path / "big.npz")
    with pytest.raises(ValueError, match=r"short.npz: its array Q claims shape \(2, 3, 3\) of float64 \(144 bytes\)"):
        MarkovInstance.load(tmp_path / "short.npz")
    assert MarkovInstance.load(tmp_path / "ok.npz").T == 3


def test_arrays_past_this_machines_memory_are_refused(tmp_path, monkeypatch):
    MarkovInstance.random(3, 3, 0).save(tmp_path / "ok.npz")
    monkeypatch.setattr(_npz, "physical_memory", lambda: 100)
    with pytest.raises(ValueError, match=r"ok.npz: its arrays would take .* bytes, more than this machine's 100 bytes"):
        MarkovInstance.load(tmp_path / "ok.npz")
    monkeypatch.setattr(_npz, "physical_memory", lambda: None)  # a system that does not say: not checked
    assert MarkovInstance.load(tmp_path / "ok.npz").V == 3


def test_the_cli_names_the_instance_file_in_one_line(tmp_path, capsys):
    from speculab.cli import main

    MarkovInstance.random(3, 3, 0).save(tmp_path / "ok.npz")
    _claiming(tmp_path / "ok.npz", tmp_path / "big.npz", "P", (100_000, 1000, 1000))
    assert main(["sim", "--instance", str(tmp_path / "big.npz")]) == 2
    err = capsys.readouterr().err
    assert "big.npz: its array P claims" in err and "--T" not in err and len(err.strip().splitlines()) == 1
