"""The macOS wheels scripts/build_wheels.sh cross-builds with zig (into dist/macos, or
$ORTCKPT_MACOS_WHEELS): for x86-64 and arm64, one abi3 (CPython 3.11+) and one cp310 wheel each;
their tags say what the extension inside is (architecture, minimum macOS version, read from the
Mach-O load commands with macholib), and the extension links nothing but macOS's system library
(no libpython: symbols come from the interpreter that loads it). CI also installs and tests these
wheels on macOS runners (.github/workflows/release.yml)."""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

import pytest

from tests.helpers.paths import REPO

mach_o = pytest.importorskip("macholib.mach_o", reason="needs macholib (requirements-dev.txt has it)")
from macholib.MachO import MachO  # noqa: E402

WHEELS = Path(os.environ.get("ORTCKPT_MACOS_WHEELS", REPO / "dist" / "macos"))
FOUND = sorted(WHEELS.glob("ortckpt-*.whl"))
pytestmark = pytest.mark.skipif(
    not FOUND,
    reason=f"no macOS wheels in {WHEELS} (scripts/build_wheels.sh builds them; scripts/test.sh runs it)",
)

_CPU = {name: code for code, name in mach_o.CPU_TYPE_NAMES.items()}
#: platform tag -> (Mach-O CPU type, the oldest macOS the wheel may claim)
PLATFORMS = {
    "macosx_10_12_x86_64": (_CPU["x86_64"], (10, 12)),
    "macosx_11_0_arm64": (_CPU["ARM64"], (11, 0)),
}
SYSTEM_LIBRARY = "/usr/lib/libSystem.B.dylib"
_NAME = re.compile(
    r"ortckpt-(?P<version>[^-]+)-(?P<python>cp3\d+)-(?P<abi>abi3|cp3\d+)-(?P<platform>macosx_\w+)\.whl"
)


def test_both_architectures_and_both_kinds_are_built() -> None:
    tags = {
        (m["python"], m["abi"], m["platform"]) for m in map(_NAME.fullmatch, (w.name for w in FOUND)) if m
    }
    assert len(tags) == len(FOUND), [w.name for w in FOUND]
    assert tags == {
        (python, abi, platform)
        for platform in PLATFORMS
        for python, abi in (("cp311", "abi3"), ("cp310", "cp310"))
    }


def _version(packed: int) -> tuple[int, int]:
    """A Mach-O version (xxxx.yy.zz in nibbles) as (major, minor)."""
    return packed >> 16, (packed >> 8) & 0xFF


@pytest.mark.parametrize("wheel", FOUND, ids=[w.name for w in FOUND])
def test_tags_minimum_macos_and_linkage(wheel: Path, tmp_path: Path) -> None:
    match = _NAME.fullmatch(wheel.name)
    assert match is not None, wheel.name
    cpu, oldest = PLATFORMS[match["platform"]]
    with zipfile.ZipFile(wheel) as z:
        wheel_file = z.read(f"ortckpt-{match['version']}.dist-info/WHEEL").decode()
        extensions = [n for n in z.namelist() if n.startswith("ortckpt/_native") and n.endswith(".so")]
        assert len(extensions) == 1, extensions
        suffix = ".abi3.so" if match["abi"] == "abi3" else f".cpython-{match['python'][2:]}-darwin.so"
        assert extensions[0] == f"ortckpt/_native{suffix}"
        extension = tmp_path / "_native.so"
        extension.write_bytes(z.read(extensions[0]))
    assert re.findall(r"^Tag: (.*)$", wheel_file, re.M) == [
        f"{match['python']}-{match['abi']}-{match['platform']}"
    ]

    headers = MachO(str(extension)).headers
    assert [h.header.cputype for h in headers] == [cpu], "one architecture, the tag's"
    minimum = None
    libraries = []
    for load, command, data in headers[0].commands:
        if load.cmd == mach_o.LC_BUILD_VERSION:
            assert command.platform == 1  # PLATFORM_MACOS
            minimum = _version(command.minos)
        elif load.cmd == mach_o.LC_VERSION_MIN_MACOSX:
            minimum = _version(command.version)
        elif load.cmd in (mach_o.LC_LOAD_DYLIB, mach_o.LC_LOAD_WEAK_DYLIB, mach_o.LC_REEXPORT_DYLIB):
            libraries.append(data.rstrip(b"\0").decode())
    # the tag promises no more than the binary needs: it names exactly the oldest macOS it runs on
    assert minimum == oldest, (minimum, match["platform"])
    assert libraries == [SYSTEM_LIBRARY], libraries
