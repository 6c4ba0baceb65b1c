"""Builds the rmcp-rdna wheel: the shim's two files (librmcp_shim.so, the object to
preload, and librmcp_shim_body.so, which it maps from beside itself) inside the rmcp_rdna
package, the rmcp executable as a script (pyproject.toml has the metadata).

The backend is setuptools-rust, not maturin: the wheel carries artifacts of two crates, the
`rmcp` binary (the root package) and the shim, whose body is a cdylib of `rmcp-shim` that
must stay a plain `librmcp_shim_body.so` beside the front `librmcp_shim.so` (which
rmcp-shim's build.rs compiles with the same C toolchain), not a Python extension module. maturin builds one
crate per wheel and packs a cdylib only as an extension module (pyo3, cffi, uniffi);
setuptools-rust builds any number of crates into one wheel (`RustBin`, `RustExtension`
with no binding) and lets this file say where each file goes.

Environment:
- RMCP_WHEEL_GLIBC=2.28 links both binaries with zig (cargo-zigbuild, ziglang; both from
  PyPI) against glibc 2.28's symbols and tags the wheel manylinux_2_28_x86_64. Without it,
  cargo links against this machine's glibc and the wheel is tagged linux_x86_64: what
  `pip install .` from a checkout needs for this machine. scripts/wheel builds the release
  wheel and checks the tag with auditwheel.
- The build is always for the explicit target x86_64-unknown-linux-gnu, so its flags stay
  away from the build scripts and from `target/release`: the binaries land in
  `target/x86_64-unknown-linux-gnu/release` (CARGO_TARGET_DIR moves `target`). With zig the
  build (and only the build: `cargo metadata` of Debian's cargo 1.85 rejects it) is given
  cargo-zigbuild's target `x86_64-unknown-linux-gnu.2.28`.
- The files packaged are the ones this build made, whatever other builds left in that
  directory (`pip install .`, then scripts/wheel, with another cargo perhaps): the body
  from cargo's report of this build, the front from the out directory of this build's
  rmcp-shim build script (where build.rs links it; cargo reports that directory even when
  the script did not need to rerun), never the copy build.rs leaves in the shared profile
  directory.
- The binaries name no path of the build machine: `--remap-path-prefix` turns the checkout
  into `rmcp` and cargo's home into `cargo` (panic locations), and `-C strip=debuginfo`
  drops the DWARF (scripts/wheel checks with `strings`).
"""

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools_rust import Binding, RustBin, RustExtension
from setuptools_rust.build import build_rust as _build_rust

try:
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel

HERE = Path(__file__).resolve().parent
PACKAGE = "rmcp_rdna"
SHIM_EXT = PACKAGE + ".librmcp_shim"
# The shim's files, copied from cargo's output directory into the package: the one list.
SHIM_FILES = ["librmcp_shim.so", "librmcp_shim_body.so"]

GLIBC = os.environ.get("RMCP_WHEEL_GLIBC", "").strip()
if GLIBC and (GLIBC.count(".") != 1 or not all(p.isdigit() for p in GLIBC.split("."))):
    sys.exit(f"RMCP_WHEEL_GLIBC={GLIBC!r}: give a glibc version such as 2.28")
TRIPLE = "x86_64-unknown-linux-gnu"


def rustflags():
    """The flags every crate of the wheel is compiled with, as CARGO_ENCODED_RUSTFLAGS
    (which cargo prefers to RUSTFLAGS, and which carries paths with spaces)."""
    if "CARGO_ENCODED_RUSTFLAGS" in os.environ:
        flags = [f for f in os.environ["CARGO_ENCODED_RUSTFLAGS"].split("\x1f") if f]
    else:
        flags = os.environ.get("RUSTFLAGS", "").split()
    cargo_home = Path(os.environ.get("CARGO_HOME") or Path.home() / ".cargo").resolve()
    rustup_home = Path(os.environ.get("RUSTUP_HOME") or Path.home() / ".rustup").resolve()
    # Later remaps win in rustc: the most specific path last.
    for src, dst in ((rustup_home, "rustup"), (cargo_home, "cargo"), (HERE, "rmcp")):
        flags.append(f"--remap-path-prefix={src}={dst}")
    flags += ["-C", "strip=debuginfo"]
    return "\x1f".join(flags)


os.environ["CARGO_ENCODED_RUSTFLAGS"] = rustflags()
os.environ.pop("RUSTFLAGS", None)
os.environ.setdefault("CARGO_BUILD_TARGET", TRIPLE)


def write_script(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


def zig_cargo(build_temp):
    """A `cargo` for setuptools-rust that links with cargo-zigbuild: its `build` and
    `rustc` become cargo-zigbuild's (`zigbuild`, `rustc`), anything else (`metadata`) is
    cargo's. cargo-zigbuild also hands build scripts its `zig cc` (CC_<target>), which
    rmcp-shim's build.rs compiles the front with, through the cc crate."""
    bindir = os.path.dirname(sys.executable)
    zigbuild = shutil.which("cargo-zigbuild", path=os.pathsep.join([bindir, os.environ.get("PATH", "")]))
    if zigbuild is None:
        sys.exit("RMCP_WHEEL_GLIBC needs cargo-zigbuild and ziglang (pip install cargo-zigbuild ziglang)")
    zigdir = os.path.join(os.path.abspath(build_temp), "zig-bin")
    os.makedirs(zigdir, exist_ok=True)
    # cargo-zigbuild runs `$CARGO_ZIGBUILD_PYTHON_PATH -m ziglang` when ziglang is installed.
    os.environ["CARGO_ZIGBUILD_PYTHON_PATH"] = sys.executable
    wrapper = os.path.join(zigdir, "cargo-zig")
    write_script(
        wrapper,
        "#!/bin/sh\n"
        'case "$1" in\n'
        f'build) shift; exec "{zigbuild}" zigbuild "$@" ;;\n'
        f'rustc) exec "{zigbuild}" "$@" ;;\n'
        '*) exec cargo "$@" ;;\n'
        "esac\n",
    )
    return wrapper


class build_rust(_build_rust):
    """setuptools-rust's build, with zig when asked, and the shim's files put in the
    package under their own names (not as an extension module `librmcp_shim.cpython-...`)."""

    def finalize_options(self):
        super().finalize_options()
        if GLIBC:
            build = self.get_finalized_command("build")
            self.cargo = zig_cargo(build.build_temp)

    def run_for_extension(self, ext):
        if GLIBC:
            # Only for the build (`--target`, which the wrapper hands to cargo-zigbuild):
            # CARGO_BUILD_TARGET, which `cargo metadata` reads too, stays a plain triple. Set
            # here, as build_ext hands its own target to this command just before running it.
            self.target = f"{TRIPLE}.{GLIBC}"
        super().run_for_extension(ext)

    def install_extension(self, ext, dylib_paths, build_artifact_dir):
        if ext.name != SHIM_EXT:
            return super().install_extension(ext, dylib_paths, build_artifact_dir)
        build_ext = self.get_finalized_command("build_ext")
        build_ext.inplace = self.inplace
        package_dir = os.path.dirname(build_ext.get_ext_fullpath(SHIM_EXT))
        os.makedirs(package_dir, exist_ok=True)
        # This build's files (see the module's docstring): the body cargo reported, the front
        # from this build's build-script out directory (`generated_files` below makes
        # setuptools-rust find it and hand it over as build_artifact_dir).
        if build_artifact_dir is None:
            sys.exit("setup.py: no out directory of rmcp-shim's build script was reported")
        sources = {
            "librmcp_shim.so": os.path.join(build_artifact_dir, "librmcp_shim.so"),
            "librmcp_shim_body.so": dylib_paths[0][1],
        }
        assert sorted(sources) == sorted(SHIM_FILES)
        for name in SHIM_FILES:
            src = sources[name]
            dst = os.path.join(package_dir, name)
            # Replace, never overwrite in place: a process may have the old file mapped.
            shutil.copyfile(src, dst + "~")
            os.chmod(dst + "~", 0o755)
            os.replace(dst + "~", dst)


class bdist_wheel(_bdist_wheel):
    """One wheel for every Python 3: py3-none-<platform>; manylinux_2_X with zig."""

    def get_tag(self):
        _, _, plat = super().get_tag()
        if GLIBC:
            major, minor = GLIBC.split(".")
            plat = f"manylinux_{major}_{minor}_x86_64"
        return "py3", "none", plat


setup(
    rust_extensions=[
        RustBin("rmcp", path="Cargo.toml", args=["--package", "rmcp", "--bin", "rmcp"]),
        RustExtension(
            SHIM_EXT,
            path="rmcp-shim/Cargo.toml",
            binding=Binding.NoBinding,
            # Not copied as such (install_extension places the shim's files); naming a file
            # of the build script's out directory is what makes setuptools-rust report that
            # directory for this build.
            generated_files={"librmcp_shim.so": PACKAGE},
        ),
    ],
    cmdclass={"build_rust": build_rust, "bdist_wheel": bdist_wheel},
)
