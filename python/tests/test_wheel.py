"""The rmcp-rdna wheel, installed in a fresh venv (scripts/wheel), tested from Python.

Run by tests/wheel.rs (cargo test), which passes the fake HIP runtime's directory
(RMCP_TEST_FAKE_HIP_DIR, libamdhip64.so.6), a framework library linked to it
(RMCP_TEST_FRAMEWORK, libframework6.so: probe_main runs HIP calls) and the RDNA2 KFD
fixture (RMCP_TEST_SYSFS), on which the shim rewrites. The fake runtime appends one line
per call it receives to FAKEHIP_RECORD: that is what "the runtime received NonCoherent"
is read from. Every process a test starts has a time limit and is ended by the test.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import rmcp_rdna

FAKE_DIR = os.environ["RMCP_TEST_FAKE_HIP_DIR"]
FRAMEWORK = os.environ["RMCP_TEST_FRAMEWORK"]
SYSFS = os.environ["RMCP_TEST_SYSFS"]
NONCOHERENT = 0x80000000
COHERENT = 0x40000000
LIMIT = 120
VENV_BIN = os.path.dirname(sys.executable)
RMCP = os.path.join(VENV_BIN, "rmcp")

# Python code: the framework, loaded as Python extensions load their libraries
# (RTLD_LOCAL), asks for one coherent host allocation (flags 0).
ALLOC = textwrap.dedent(
    f"""
    import ctypes
    def alloc():
        fw = ctypes.CDLL({FRAMEWORK!r}, mode=ctypes.RTLD_LOCAL)
        argv = (ctypes.c_char_p * 2)(b"probe", b"hipHostMalloc:4096:0")
        assert fw.probe_main(2, argv) == 0
    """
)

# Python code: the same call, looked up with dlsym on the runtime's handle (ctypes).
ALLOC_DLSYM = textwrap.dedent(
    f"""
    import ctypes
    def alloc_dlsym():
        hip = ctypes.CDLL({os.path.join(FAKE_DIR, "libamdhip64.so.6")!r}, mode=ctypes.RTLD_LOCAL)
        p = ctypes.c_void_p()
        assert hip.hipHostMalloc(ctypes.byref(p), ctypes.c_size_t(4096), ctypes.c_uint(0)) == 0
    """
)

SHIM_MAPPED = textwrap.dedent(
    """
    def shim_mapped():
        with open("/proc/self/maps") as m:
            return sorted({l.split()[-1] for l in m if l.rstrip().endswith("/librmcp_shim.so")})
    """
)


def base_env(tmp_path, **extra):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RMCP_", "FAKEHIP_")) and k != "LD_PRELOAD"
    }
    env.update(
        LD_LIBRARY_PATH=FAKE_DIR,
        RMCP_SYSFS_ROOT=SYSFS,
        FAKEHIP_RECORD=str(tmp_path / "record"),
    )
    env.update(extra)
    return env


def run(args, env, timeout=LIMIT, check=True):
    p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{args}: exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def python(code, env, **kw):
    return run([sys.executable, "-c", code], env, **kw)


def record(tmp_path, func="hipHostMalloc"):
    """(flags, caller) of each call of `func` the fake runtime received."""
    path = tmp_path / "record"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split(" ")
        if parts[0] != func:
            continue
        kv = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        out.append((int(kv["flags"], 16), kv["caller"]))
    return out


def last_json(stdout):
    return json.loads(stdout.strip().splitlines()[-1])


# ---- the install --------------------------------------------------------------------


def test_no_rust_on_path_and_the_cli_comes_from_the_venv():
    assert shutil.which("cargo") is None and shutil.which("rustc") is None, os.environ["PATH"]
    assert shutil.which("rmcp") == RMCP
    out = run([RMCP, "--version"], dict(os.environ)).stdout
    assert out.startswith("rmcp 0.1.0"), out
    assert run([sys.executable, "-m", "rmcp_rdna", "--version"], dict(os.environ)).stdout == out


# The targets rmcp check's GPU code must cover (build.rs's list): every GPU rmcp rewrites
# for by default, and the RDNA3 controls.
CHECK_TARGETS = [f"gfx101{i}" for i in range(4)] + [f"gfx103{i}" for i in range(7)] + [
    f"gfx110{i}" for i in range(4)
]


def test_the_check_gpu_code_is_inside():
    """rmcp check needs no compiler: the wheel's rmcp carries the offload bundle, with a
    code object for every target, and says so in `rmcp check --json`."""
    with open(os.path.realpath(RMCP), "rb") as f:
        data = f.read()
    assert b"__CLANG_OFFLOAD_BUNDLE__" in data
    for t in CHECK_TARGETS:
        assert f"hipv4-amdgcn-amd-amdhsa--{t}".encode() in data, t
    # With the system's runtime (Debian's 5.2.3, when installed) and no GPU: both runs
    # load it and find no device.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RMCP_") and k not in ("LD_PRELOAD", "LD_LIBRARY_PATH")
    }
    env.update(RMCP_PYTHON="")
    p = run([RMCP, "check", "--json"], env, check=False)
    assert "built without" not in p.stderr, p.stderr
    out = json.loads(p.stdout)
    assert sorted(out["kernels"]["targets"]) == sorted(CHECK_TARGETS), out
    assert out["kernels"]["code_object_version"] == 4, out
    if os.path.exists("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5") and not os.path.exists("/dev/kfd"):
        assert (p.returncode, out["verdict"]) == (2, "no-gpu"), out


def test_doctor_finds_the_shim_in_the_package(tmp_path):
    p = run([RMCP, "doctor", "--json", "--sysfs", SYSFS], base_env(tmp_path), check=False)
    report = json.loads(p.stdout)
    shim = [f for f in report["findings"] if f["check"] == "shim"]
    assert len(shim) == 1, shim
    assert os.path.realpath(shim[0]["path"]) == rmcp_rdna.shim_path(), shim
    assert shim[0]["found_in"] == "the rmcp_rdna package beside rmcp", shim


def test_shim_path_is_the_packaged_library():
    path = rmcp_rdna.shim_path()
    assert os.path.isabs(path) and os.path.basename(path) == "librmcp_shim.so"
    assert os.path.dirname(path) == os.path.dirname(os.path.abspath(rmcp_rdna.__file__))
    with open(path, "rb") as f:
        assert f.read(4) == b"\x7fELF"


def test_shim_path_names_the_missing_file(tmp_path):
    # The package's code without the library beside it.
    pkg = tmp_path / "rmcp_rdna"
    pkg.mkdir()
    shutil.copy(rmcp_rdna.__file__, pkg / "__init__.py")
    code = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import rmcp_rdna; rmcp_rdna.shim_path()"
    p = python(code, dict(os.environ), check=False)
    assert p.returncode == 1
    assert "FileNotFoundError" in p.stderr and str(pkg / "librmcp_shim.so") in p.stderr, p.stderr
    # An instruction that works while rmcp-rdna is not on PyPI: the release's wheel file, or
    # a build from a checkout; never `pip install rmcp-rdna`.
    wheel = f"rmcp_rdna-{rmcp_rdna.__version__}-py3-none-manylinux_2_28_x86_64.whl"
    assert f"pip install --force-reinstall {wheel}" in p.stderr, p.stderr
    assert "pip install --force-reinstall . there" in p.stderr, p.stderr
    assert "install --force-reinstall rmcp-rdna" not in p.stderr, p.stderr


# ---- rmcp run and LD_PRELOAD from the wheel --------------------------------------------


def test_rmcp_run_from_the_wheel_rewrites(tmp_path):
    code = ALLOC + "alloc()"
    python(code, base_env(tmp_path))
    assert record(tmp_path)[0][0] == 0, "without the shim the runtime gets flags 0"
    (tmp_path / "record").unlink()
    run([RMCP, "run", "--", sys.executable, "-c", code], base_env(tmp_path))
    assert [f for f, _ in record(tmp_path)] == [NONCOHERENT]


# ---- enable() ---------------------------------------------------------------------------


def test_enable_reaches_a_framework_loaded_rtld_local(tmp_path):
    code = (
        ALLOC
        + SHIM_MAPPED
        + textwrap.dedent(
            """
            import json, os, rmcp_rdna
            assert shim_mapped() == []
            first = rmcp_rdna.enable()
            assert rmcp_rdna.enable() == first  # a second call: a no-op
            alloc()
            s = rmcp_rdna.stats()
            print(json.dumps({"pid": os.getpid(), "mapped": shim_mapped(), "path": first,
                              "hipHostMalloc": s["calls"]["hipHostMalloc"], "spid": s["pid"]}))
            """
        )
    )
    out = last_json(python(code, base_env(tmp_path)).stdout)
    assert out["mapped"] == [out["path"]] == [rmcp_rdna.shim_path()], out
    assert [f for f, _ in record(tmp_path)] == [NONCOHERENT]
    assert out["spid"] == out["pid"]
    assert out["hipHostMalloc"]["calls"] == 1 and out["hipHostMalloc"]["rewritten"] == 1, out


def test_enable_turns_tritons_buffer_ops_off_on_an_rx_5000(tmp_path):
    # The RDNA1 fixture beside the RDNA2 one (tests/fixtures/rdna1): the quirks of
    # rmcp_rdna._quirks, as `rmcp run` applies them (tests/cli_quirks.rs has the table).
    rdna1 = os.path.join(os.path.dirname(SYSFS), "rdna1")
    code = textwrap.dedent(
        """
        import json, os, rmcp_rdna
        rmcp_rdna.enable()
        print(json.dumps({v: os.environ.get(v) for v in
                          ("AMDGCN_USE_BUFFER_OPS", "TORCHINDUCTOR_CACHE_DIR")}))
        """
    )
    env = base_env(tmp_path, RMCP_SYSFS_ROOT=rdna1, LOGNAME="rmcpquirks", TMPDIR="/tmp")
    for k in ("AMDGCN_USE_BUFFER_OPS", "TORCHINDUCTOR_CACHE_DIR", "USER", "LNAME", "USERNAME"):
        env.pop(k, None)
    p = python(code, env)
    assert last_json(p.stdout) == {
        "AMDGCN_USE_BUFFER_OPS": "0",
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_rmcpquirks_rmcp_nobufferops",
    }, p.stdout
    assert "AMDGCN_USE_BUFFER_OPS=0" in p.stderr, p.stderr
    # Set by the user: kept. RMCP_QUIRKS=off, or the RDNA2 fixture: nothing set.
    p = python(code, dict(env, AMDGCN_USE_BUFFER_OPS="1"))
    assert last_json(p.stdout)["AMDGCN_USE_BUFFER_OPS"] == "1"
    assert last_json(p.stdout)["TORCHINDUCTOR_CACHE_DIR"] is None
    for extra in ({"RMCP_QUIRKS": "off"}, {"RMCP_SYSFS_ROOT": SYSFS}):
        p = python(code, dict(env, **extra))
        assert set(last_json(p.stdout).values()) == {None}, (extra, p.stdout)


def test_enable_cannot_reach_dlsym_on_a_handle_but_ld_preload_does(tmp_path):
    # The documented limit: after enable(), a lookup with dlsym on the runtime's handle
    # binds to libc's dlsym, which gives the runtime's own function.
    code = ALLOC_DLSYM + "import rmcp_rdna; rmcp_rdna.enable(); alloc_dlsym()"
    python(code, base_env(tmp_path))
    assert [f for f, _ in record(tmp_path)] == [0], record(tmp_path)
    (tmp_path / "record").unlink()
    python(ALLOC_DLSYM + "alloc_dlsym()", base_env(tmp_path, LD_PRELOAD=rmcp_rdna.shim_path()))
    assert [f for f, _ in record(tmp_path)] == [NONCOHERENT], record(tmp_path)


def test_enable_after_a_runtime_is_mapped_refuses_and_loads_nothing(tmp_path):
    code = (
        ALLOC
        + SHIM_MAPPED
        + textwrap.dedent(
            """
            import rmcp_rdna
            alloc()
            try:
                rmcp_rdna.enable()
            except RuntimeError as e:
                print("refused:", e)
            print("mapped:", shim_mapped())
            """
        )
    )
    out = python(code, base_env(tmp_path)).stdout
    assert "refused: rmcp_rdna.enable(): a HIP runtime is already loaded" in out, out
    assert "libamdhip64.so.6" in out and "Restart the interpreter" in out, out
    assert "mapped: []" in out, out


def test_enable_with_the_shim_preloaded_is_a_no_op(tmp_path):
    code = SHIM_MAPPED + "import rmcp_rdna; rmcp_rdna.enable(); print(shim_mapped())"
    env = base_env(tmp_path, LD_PRELOAD=rmcp_rdna.shim_path())
    assert python(code, env).stdout.strip() == repr([rmcp_rdna.shim_path()])


# ---- stats() ----------------------------------------------------------------------------


def test_stats_of_a_preloaded_shim_count_this_process(tmp_path):
    code = ALLOC + "import json, rmcp_rdna; alloc(); alloc(); print(json.dumps(rmcp_rdna.stats()))"
    env = base_env(tmp_path, LD_PRELOAD=rmcp_rdna.shim_path())
    s = last_json(python(code, env).stdout)
    assert s["mode"] == "auto"
    assert s["calls"]["hipHostMalloc"]["calls"] == 2
    assert s["calls"]["hipHostMalloc"]["rewritten"] == 2
    assert s["calls"]["hipMalloc"]["calls"] == 0


def test_stats_without_the_shim_says_so(tmp_path):
    code = "import rmcp_rdna\ntry:\n    rmcp_rdna.stats()\nexcept RuntimeError as e:\n    print(e)"
    out = python(code, base_env(tmp_path)).stdout
    assert "the shim is not loaded in this process" in out, out


# ---- Jupyter ----------------------------------------------------------------------------


def test_kernel_spec_preloads_the_shim(tmp_path, monkeypatch):
    from jupyter_client.manager import KernelManager

    data = tmp_path / "jupyter-data"
    env = base_env(tmp_path, JUPYTER_DATA_DIR=str(data))
    p = run([sys.executable, "-m", "rmcp_rdna", "kernel", "install", "--name", "rmcp-test"], env)
    spec_dir = data / "kernels" / "rmcp-test"
    spec = json.loads((spec_dir / "kernel.json").read_text())
    assert spec["env"]["LD_PRELOAD"] == rmcp_rdna.shim_path(), spec
    assert spec["argv"][0] == sys.executable and "ipykernel_launcher" in spec["argv"], spec
    assert str(spec_dir) in p.stdout
    again = run([RMCP, "kernel", "install", "--name", "rmcp-test"], env, check=False)
    assert again.returncode == 1 and "give --force" in again.stderr, again
    run([RMCP, "kernel", "install", "--name", "rmcp-test", "--force"], env)

    # The test process has no shim; the kernel gets it from the spec alone.
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("JUPYTER_PATH", str(data))
    assert "LD_PRELOAD" not in os.environ
    km = KernelManager(kernel_name="rmcp-test")
    km.start_kernel()
    try:
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        cell = (
            ALLOC
            + SHIM_MAPPED
            + "import json, os, rmcp_rdna\nalloc()\n"
            + 'print(json.dumps({"pid": os.getpid(), "mapped": shim_mapped(), '
            + '"stats": rmcp_rdna.stats()["calls"]["hipHostMalloc"]}))'
        )
        outputs = []

        def hook(msg):
            if msg["msg_type"] == "stream":
                outputs.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                outputs.append("\n".join(msg["content"]["traceback"]))

        reply = kc.execute_interactive(cell, timeout=60, output_hook=hook)
        assert reply["content"]["status"] == "ok", outputs
        out = last_json("".join(outputs))
        kc.stop_channels()
    finally:
        km.shutdown_kernel(now=True)
    assert out["pid"] != os.getpid()
    assert out["mapped"] == [rmcp_rdna.shim_path()], out
    assert out["stats"]["rewritten"] == 1, out
    assert [f for f, _ in record(tmp_path)] == [NONCOHERENT]


# ---- worker pools -----------------------------------------------------------------------

POOL = (
    ALLOC
    + SHIM_MAPPED
    + textwrap.dedent(
        """
        import json, multiprocessing, os, sys
        from concurrent.futures import ProcessPoolExecutor
        import rmcp_rdna

        def task(i):
            alloc()
            return os.getpid(), shim_mapped(), rmcp_rdna.stats()["calls"]["hipHostMalloc"]

        if __name__ == "__main__":
            ctx = multiprocessing.get_context(sys.argv[1])
            with ProcessPoolExecutor(max_workers=2, mp_context=ctx) as pool:
                results = [f.result(timeout=60) for f in [pool.submit(task, i) for i in range(4)]]
            print(json.dumps({"parent": os.getpid(), "results": results}))
        """
    )
)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_process_pool_workers_carry_the_shim(tmp_path, method):
    script = tmp_path / "pool.py"
    script.write_text(POOL)
    env = base_env(tmp_path, RMCP_STATS_FILE=str(tmp_path / "stats-%p.json"))
    out = last_json(run([RMCP, "run", "--", sys.executable, str(script), method], env).stdout)
    pids = {pid for pid, _, _ in out["results"]}
    assert out["parent"] not in pids
    for pid, mapped, counts in out["results"]:
        assert mapped == [rmcp_rdna.shim_path()]
        # Each worker counts its own calls (a forked one starts from zero).
        assert 1 <= counts["rewritten"] == counts["calls"] <= 4
    assert [f for f, _ in record(tmp_path)] == [NONCOHERENT] * 4
    files = {p.name for p in tmp_path.glob("stats-*.json")}
    if method == "spawn":
        # Spawned workers exit through Python's exit, so the shim writes their reports.
        assert {f"stats-{pid}.json" for pid in pids} <= files, files
        total = sum(
            json.loads((tmp_path / f"stats-{pid}.json").read_text())["calls"]["hipHostMalloc"]["rewritten"]
            for pid in pids
        )
        assert total == 4
    else:
        # Forked workers end with os._exit, which runs no exit handler: no report (README).
        assert not ({f"stats-{pid}.json" for pid in pids} & files), files


# ---- Ray --------------------------------------------------------------------------------

RAY = (
    ALLOC
    + SHIM_MAPPED
    + textwrap.dedent(
        """
        import json, os, sys
        import ray
        import rmcp_rdna

        @ray.remote
        def task(i):
            alloc()
            return os.getpid(), shim_mapped(), rmcp_rdna.stats()["calls"]["hipHostMalloc"]

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"LD_PRELOAD": rmcp_rdna.shim_path()}})
        try:
            results = ray.get([task.remote(i) for i in range(4)], timeout=120)
        finally:
            ray.shutdown()
        print(json.dumps({"driver": os.getpid(), "driver_mapped": shim_mapped(), "results": results}))
        """
    )
)


def test_ray_tasks_carry_the_shim_through_runtime_env(tmp_path):
    script = tmp_path / "ray_job.py"
    script.write_text(RAY)
    # Ray's sockets live in its temp directory, whose path must stay short.
    import tempfile

    ray_tmp = tempfile.mkdtemp(prefix="rmcp-ray-", dir="/tmp")
    env = base_env(tmp_path, RAY_TMPDIR=ray_tmp, RAY_USAGE_STATS_ENABLED="0")
    p = subprocess.Popen(
        [sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )
    try:
        stdout, stderr = p.communicate(timeout=300)
    finally:
        # Whatever Ray left running in the job's session is ended with it.
        try:
            os.killpg(p.pid, 9)
        except ProcessLookupError:
            pass
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert p.returncode == 0, stderr[-4000:]
    out = last_json(stdout)
    assert out["driver_mapped"] == [], "the driver has no shim: only the workers get it"
    for pid, mapped, counts in out["results"]:
        assert pid != out["driver"]
        assert mapped == [rmcp_rdna.shim_path()]
        assert counts["rewritten"] >= 1
    assert [f for f, _ in record(tmp_path)] == [NONCOHERENT] * 4
