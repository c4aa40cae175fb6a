"""Host pool sizing as upstream: --hicache-ratio / --hicache-size, page alignment, the host >
device rule and the free-memory reserve; hand-worked numbers."""

import contextlib
import io
import json

import pytest

from conformance.cli.main import main as cli_main
from hicache_ref.spec import sizing

SEED_TOKEN_BYTES = 78 * 576 * 2  # MLA: layers x latent width x bf16 = 89,856 bytes a token


def test_ratio_aligns_up_with_one_page_more():
    # int(2,000,000 x 2.0) = 4,000,000 = 62,500 pages of 64; + 1 page = 62,501 pages.
    assert sizing.host_tokens(2_000_000, 64, SEED_TOKEN_BYTES, ratio=2.0) == 62_501 * 64 == 4_000_064
    assert sizing.host_tokens(2_000_000, 64, SEED_TOKEN_BYTES) == 4_000_064  # ratio defaults to 2.0
    # int(1,000 x 1.5) = 1,500 = 23 pages of 64 (1,472) + 28: 1,500 // 64 + 1 = 24 pages = 1,536.
    assert sizing.host_tokens(1_000, 64, 100, ratio=1.5) == 1_536


def test_size_in_gb_overrides_the_ratio():
    # 100 GB = 10^11 bytes // 89,856 = 1,112,891 tokens; // 64 = 17,388 pages; + 1 = 17,389 pages.
    assert 10**11 // SEED_TOKEN_BYTES == 1_112_891
    assert sizing.host_tokens(2_000_000, 64, SEED_TOKEN_BYTES, ratio=9.0, size_gb=100) == 17_389 * 64


def test_host_must_exceed_device():
    # Ratio 1: 2,000,000 // 64 + 1 = 31,251 pages = 2,000,064 > 2,000,000: upstream accepts it.
    host = sizing.host_tokens(2_000_000, 64, SEED_TOKEN_BYTES, ratio=1.0)
    assert host == 2_000_064
    sizing.check_host_larger(host, 2_000_000)
    # Ratio 0.5: 1,000,000 // 64 + 1 = 15,626 pages = 1,000,064 <= 2,000,000: refused.
    with pytest.raises(ValueError, match="1,000,064 tokens is not larger than the device pool of 2,000,000"):
        sizing.check_host_larger(sizing.host_tokens(2_000_000, 64, SEED_TOKEN_BYTES, ratio=0.5), 2_000_000)


def test_free_memory_reserve():
    gib = 2**30
    sizing.check_host_memory(6 * gib, 16 * gib)  # 16 - 10 reserved = 6 GiB: exactly fits
    with pytest.raises(ValueError, match="after upstream's 10 GiB reserve"):
        sizing.check_host_memory(6 * gib + 1, 16 * gib)
    with pytest.raises(ValueError, match="available after"):
        sizing.check_host_memory(1, 8 * gib)  # less than the reserve: nothing fits


def test_mem_available_reads_meminfo(tmp_path):
    p = tmp_path / "meminfo"
    p.write_text("MemTotal: 100 kB\nMemAvailable:  2048 kB\n")
    assert sizing.mem_available(str(p)) == 2048 * 1024
    assert sizing.mem_available(str(tmp_path / "absent")) is None


@pytest.mark.parametrize("kw,name", [(dict(ratio=0), "ratio"), (dict(ratio=float("nan")), "ratio"),
                                     (dict(size_gb=0), "size_gb"), (dict(size_gb=1.5), "size_gb")])
def test_bad_arguments_name_themselves(kw, name):
    with pytest.raises(ValueError, match=f"^{name}: "):
        sizing.host_tokens(1000, 64, 100, **kw)


def _cli(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli_main(["replay", *args])
    return rc, out.getvalue(), err.getvalue()


TRACE = '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}\n'


def test_cli_sizes_l2_from_the_ratio_and_reports_it(tmp_path):
    t = tmp_path / "t.jsonl"
    t.write_text(TRACE)
    rc, out, _ = _cli("--trace", str(t), "--l1-tokens", "2M", "--hicache-ratio", "2", "--json", "--quiet")
    fig = json.loads(out)
    assert rc == 0 and fig["l2_tokens"] == 4_000_064
    s = fig["host_sizing"]
    assert (s["hicache_ratio"], s["device_tokens"], s["host_tokens"]) == (2.0, 2_000_000, 4_000_064)
    assert s["host_bytes"] == 4_000_064 * SEED_TOKEN_BYTES and s["free_memory_check"].startswith("not run")
    # 200 GB // 89,856 = 2,225,783 tokens; // 64 = 34,777 pages; + 1 = 34,778 pages = 2,225,792.
    rc, out, _ = _cli("--trace", str(t), "--l1-tokens", "2M", "--hicache-size", "200", "--json", "--quiet")
    assert json.loads(out)["l2_tokens"] == 34_778 * 64 == 2_225_792
    # 100 GB holds 1,112,896 tokens: not more than L1's 2,000,000, which upstream refuses.
    rc, out, err = _cli("--trace", str(t), "--l1-tokens", "2M", "--hicache-size", "100")
    assert rc == 2 and "hicache: --hicache-size: host pool of 1,112,896 tokens is not larger" in err


@pytest.mark.parametrize("argv,option,text", [
    (["--l1-tokens", "2M", "--hicache-ratio", "2", "--l2-tokens", "8M"], "--hicache-ratio", "--l2-tokens"),
    (["--l1-tokens", "2M", "--hicache-size", "9", "--l2-tokens", "8M"], "--hicache-size", "--l2-tokens"),
    (["--l1-tokens", "2M", "--hicache-ratio", "2", "--hicache-size", "9"], "--hicache-size", "--hicache-ratio"),
    (["--hicache-ratio", "2"], "--hicache-ratio", "--l1-tokens"),
    (["--l1-tokens", "2M", "--hicache-ratio", "0.5"], "--hicache-ratio", "not larger than the device pool"),
    (["--l1-tokens", "2M", "--hicache-ratio", "-1"], "--hicache-ratio", "positive"),
])
def test_cli_refuses_conflicts_naming_the_option(tmp_path, argv, option, text):
    t = tmp_path / "t.jsonl"
    t.write_text(TRACE)
    rc, out, err = _cli("--trace", str(t), *argv)
    lines = err.strip().splitlines()
    assert rc == 2 and out == "" and len(lines) == 1
    assert lines[0].startswith(f"hicache: {option}: ") and text in lines[0]
