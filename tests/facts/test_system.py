"""The disk, swap and boot facts' parsers on the edges their recorded cases (tests/facts/df, swaps, cmdline) do not
reach, and what a fact is: its command or path beside its parser."""

from __future__ import annotations

import pytest

from provision.facts import fact
from provision.facts.system import CMDLINE, DF, SWAPS, parse_cmdline, parse_df, parse_swaps

pytestmark = pytest.mark.fast

DF_P = """Filesystem     1024-blocks      Used Available Capacity Mounted on
/dev/nvme0n1p2   1843269936 201433676 1548119112      12% /
/dev/md0        30005420032 27004878028 3000541992      91% /raid/scratch space
"""


def test_a_mount_point_with_spaces_is_kept_whole() -> None:
    root, scratch = parse_df(DF_P)
    assert (root.mount, root.percent) == ("/", 12)
    assert (scratch.mount, scratch.percent, scratch.available_kb) == ("/raid/scratch space", 91, 3000541992)


@pytest.mark.parametrize("text", ["", DF_P.splitlines()[0] + "\n", "\n".join(DF_P.splitlines()[::2])],
                         ids=["nothing", "the header alone", "the root line cut"])
def test_a_df_without_its_root_filesystem_was_cut_and_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_df(text)


def test_swaps_and_the_kernel_command_line() -> None:
    swaps = parse_swaps("Filename\tType\tSize\tUsed\tPriority\n/swap.img  file  8388604  0  -2\n")
    assert [(area.name, area.kind, area.size_kb) for area in swaps] == [("/swap.img", "file", 8388604)]
    assert parse_swaps("Filename\tType\tSize\tUsed\tPriority\n") == []  # the header alone: no swap, not unread
    line = parse_cmdline('BOOT_IMAGE=/vmlinuz ro iommu=off quiet dyndbg="file x.c +p" iommu=pt\n')
    assert line.value("iommu") == "pt", "the kernel reads the last one"
    assert line.value("quiet") == "" and line.value("pci") is None and line.value("dyndbg") == "file x.c +p"
    for odd in ("host17 | ro quiet\n", 'ro dyndbg="unbalanced\n', "ro\nquiet\n"):
        with pytest.raises(ValueError):
            parse_cmdline(odd)


def test_a_fact_is_its_command_or_file_beside_its_parser() -> None:
    assert (DF.source, DF.argv, DF.needs_root) == ("command", ["df", "-P"], False)
    assert (SWAPS.source, SWAPS.path, CMDLINE.path) == ("file", "/proc/swaps", "/proc/cmdline")
    devices = fact.links("devices", "/sys/bus/pci/drivers/mlx5_core", dict)
    assert devices.path == "/sys/bus/pci/drivers/mlx5_core" and devices.parse({"a": "b"}) == {"a": "b"}
    dmesg = fact.command("kernel_log", ["dmesg"], str.splitlines, needs_root=True)
    assert dmesg.needs_root and dmesg.parse("a\nb") == ["a", "b"]
    with pytest.raises(AssertionError):
        _ = SWAPS.argv  # a file has no command line
