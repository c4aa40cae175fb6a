"""`hicache plan`: JSON keys, the seed segment counts, and argument errors."""

import json

import pytest

from conformance.cli.main import main

SEED = ["--attention", "mla", "--tokens", "32768", "--page-size", "64", "--layers", "78", "--kv-dim", "576", "--json"]


def _plan(capsys, *args):
    assert main(["plan", *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("layout,segments", [("layer_first", 78), ("page_first_direct", 39_936)])
def test_seed_counts_and_keys(capsys, layout, segments):
    out = _plan(capsys, "--host-layout", layout, *SEED)
    assert {"layout", "attention", "direction", "tokens", "page_size", "layers", "segments", "bytes",
            "plan_seconds"} <= out.keys()
    assert out["segments"] == segments
    assert out["bytes"] == 32768 * 78 * 576 * 2
    assert out["direction"] == "d2h"


def test_random_indices_fragment_layer_first_into_pages(capsys):
    out = _plan(capsys, "--host-layout", "layer_first", "--indices", "random", "--seed", "3", *SEED)
    # Scattered pages on both sides: at most one segment per (page, layer), at least one per layer.
    assert 78 < out["segments"] <= 512 * 78


def test_mha_page_head(capsys):
    out = _plan(capsys, "--host-layout", "page_head", "--attention", "mha", "--tokens", "128", "--page-size", "64",
                "--layers", "2", "--heads", "4", "--kv-dim", "64", "--dtype", "fp16", "--json")
    # page_head splits each token over heads: no two heads or tokens are adjacent on the host.
    assert out["segments"] == 2 * 2 * 128 * 4


@pytest.mark.parametrize("args,named", [
    (["--host-layout", "page_head", *SEED], "layout"),
    (["--host-layout", "layer_first", "--attention", "mla", "--tokens", "0", "--layers", "2", "--kv-dim", "8"], "--tokens"),
    (["--host-layout", "layer_first", "--attention", "mla", "--tokens", "8", "--layers", "2", "--kv-dim", "8",
      "--dtype", "int3"], "dtype"),
])
def test_bad_arguments_exit_2_naming_the_argument(capsys, args, named):
    assert main(["plan", *args]) == 2
    assert named in capsys.readouterr().err


def test_sizes_read_one_way_in_every_command(capsys):
    from conformance.cli.main import build_parser

    out = _plan(capsys, "--host-layout", "layer_first", "--attention", "mla", "--tokens", "32K", "--layers", "2",
                "--kv-dim", "8", "--json")
    assert out["tokens"] == 32_000 and isinstance(out["tokens"], int)
    parser = build_parser()
    assert parser.parse_args(["bench", "transfer", "--tokens", "32K"]).tokens == 32_000
    assert parser.parse_args(["replay", "--ghost", "--ghost-entries", "32K"]).ghost_entries == 32_000
    assert parser.parse_args(["plan", "--host-layout", "layer_first", "--attention", "mla", "--tokens", "2_048",
                              "--layers", "2"]).tokens == 2048


@pytest.mark.parametrize("args,named", [
    (["--attention", "mla", "--kv-dim", "8", "--heads", "8"], "--heads"),
])
def test_geometry_options_of_the_other_attention_are_refused(capsys, args, named):
    assert main(["plan", "--host-layout", "layer_first", "--tokens", "64", "--layers", "2", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hicache: {named}: ") and err.count("\n") == 1


def test_target_counts_print_as_integers(capsys):
    from conformance.bench.common import check_targets

    _, lines = check_targets("emu", {"plan_segments_page_first_direct_seed": 39_936})
    assert any("39,936 segments" in line for line in lines) and not any("e+04" in line for line in lines)


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("hicache ")


def test_every_subcommand_and_benchmark_is_wired(capsys):
    from conformance.cli.bench import BENCHES
    from conformance.cli.main import COMMANDS, build_parser

    help_text = build_parser().format_help()
    assert all(name in help_text for name in COMMANDS)
    for name in BENCHES:
        with pytest.raises(SystemExit) as e:
            main(["bench", name, "--help"])
        assert e.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: hicache bench {name}")


class FakeTTY:
    def __init__(self, tty: bool):
        self.tty, self.text = tty, ""

    def isatty(self) -> bool:
        return self.tty

    def write(self, s: str) -> None:
        self.text += s

    def flush(self) -> None:
        pass


def test_progress_only_on_a_terminal_and_not_with_quiet():
    import time

    from conformance.common.progress import ticker

    for tty, quiet, shown in ((True, False, True), (False, False, False), (True, True, False)):
        stream = FakeTTY(tty)
        with ticker("hicache replay", quiet, stream=stream, after=0.0, every=0.01):
            time.sleep(0.1)
        assert ("hicache replay: 0 s" in stream.text) is shown, (tty, quiet, stream.text)
        if shown:
            assert stream.text.endswith("\r\033[K")  # erased: stdout's table is not interleaved
