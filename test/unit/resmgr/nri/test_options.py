"""cri-resmgr's front end flags: relay by default, NRI on request, a two-digit plugin index."""

from __future__ import annotations

import pytest

from resmgr.options import DEFAULT_NRI_SOCKET, build_parser


def test_relay_is_the_default_front_end() -> None:
    args = build_parser().parse_args([])
    assert (args.frontend, args.nri_socket, args.nri_plugin_name, args.nri_plugin_index) == (
        "relay", DEFAULT_NRI_SOCKET, "cri-resmgr", "90")


@pytest.mark.parametrize("argv", [["--nri"], ["--frontend", "nri"], ["--frontend=nri"]])
def test_nri_mode_is_chosen_by_either_flag(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).frontend == "nri"


@pytest.mark.parametrize("index", ["9", "100", "ab", ""])
def test_plugin_index_must_be_two_digits(index: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--nri-plugin-index", index])
    assert "two-digit NRI plugin index" in capsys.readouterr().err


def test_help_explains_the_modes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "registers with containerd as an NRI plugin" in out and "serves no relay socket" in out


def test_the_relay_does_not_load_the_nri_front_end() -> None:
    """NRI's message descriptors cost ~0.9 MB of resident memory: only NRI mode imports them."""
    import subprocess
    import sys
    from pathlib import Path

    import resmgr

    code = "import sys, resmgr.cli; print(sorted(m for m in sys.modules if m.startswith('resmgr.nri')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(resmgr.__file__).parent.parent).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("columns", ["60", "133", "x", "-1"])
def test_help_is_as_wide_as_argparse_makes_it(columns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The formatter finds the width as argparse's own does (it imports shutil for it; ours does not)."""
    import argparse

    from resmgr.options import HelpFormatter

    monkeypatch.setenv("COLUMNS", columns)
    parser = build_parser()
    ours = parser.format_help()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    assert ours == parser.format_help()
    assert HelpFormatter("x")._width == argparse.RawDescriptionHelpFormatter("x")._width
