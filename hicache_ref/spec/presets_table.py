"""The semantics presets as a markdown table: one row per switch, its value in each preset, and
the SGLang 0.5.23 file and function it mirrors. hicache_ref/README.md carries it between two
markers (a test checks it is current); `python -m hicache_ref.spec.presets_table` prints it.
"""

from __future__ import annotations

from hicache_ref.spec.presets import PD_PRESETS, PRESETS, SWITCH_TABLE, preset_names

BEGIN, END = "<!-- presets table: python -m hicache_ref.spec.presets_table -->", "<!-- end presets table -->"


def _cell(name: str, switch: str) -> str:
    v, pd = PRESETS[name][switch], PD_PRESETS[name].get(switch)
    text = "the device order" if v is None else f"`{v}`"
    return text + (f" (PD: `{pd}`)" if pd is not None else "")


def table() -> str:
    """The switches per preset as a markdown table, with the upstream file and function of each."""
    names = preset_names()
    head = ["Switch", "Option", *(f"`{n}`" for n in names), "SGLang 0.5.23: file: function"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in SWITCH_TABLE:
        cells = [f"`{s.name}`: {s.what}", f"`{s.option}`", *(_cell(n, s.name) for n in names), s.source]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def readme_table(readme: str) -> str:
    """The table as it stands in README text `readme`: the lines between the two markers."""
    start, end = readme.index(BEGIN) + len(BEGIN) + 1, readme.index(END)
    return readme[start:end]


if __name__ == "__main__":
    print(table(), end="")
