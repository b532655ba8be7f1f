"""The GitHub workflows as a careful project writes them: actions pinned by commit, no token left behind by checkout,
and installs into a venv of the job's own, never into a self-hosted runner's Python. The GPU gate and the bless run
once per kind of GPU runner, each against its own baseline file, and check that their runner is that kind; their
steps' scripts run here, with a stand-in `python`."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from speedgate.hardware import cpu_hardware, hardware_key, validate_key

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def test_there_are_workflows() -> None:
    assert len(WORKFLOWS) >= 3


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit_with_its_version_beside_it(workflow: Path) -> None:
    # A tag can be moved to other code; a commit cannot. The comment says which release the commit is.
    uses = re.findall(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", workflow.read_text(), re.MULTILINE)
    assert uses
    for action, rest in uses:
        assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", action), f"{workflow.name}: {action} is not pinned by commit"
        assert re.fullmatch(r"\s+# v\d+(\.\d+)*", rest), f"{workflow.name}: {action}: say its release, '# vX.Y.Z'"


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_checkout_leaves_no_credentials(workflow: Path) -> None:
    text = workflow.read_text()
    steps = re.split(r"^\s*- ", text, flags=re.MULTILINE)
    for step in steps:
        if "actions/checkout@" in step:
            assert re.search(r"^\s+persist-credentials: false\b", step, re.MULTILINE), (
                f"{workflow.name}: checkout keeps the job's token in .git/config; set persist-credentials: false")


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_pip_installs_into_a_venv(workflow: Path) -> None:
    # A self-hosted runner keeps its disk between jobs: an install into its own Python changes it for every later job.
    for line in workflow.read_text().splitlines():
        if re.search(r"\bpip3?\b.*\binstall\b", line):
            assert re.search(r"venv/bin/(python3?\"?\s+-m\s+)?pip", line), f"{workflow.name}: installs outside a venv: {line.strip()}"


# A fleet of GPU runners (docs/running.md): the gate and the bless run once per kind of GPU, each kind named by its
# hardware key, on runners labelled with that key, and each job checks its runner's GPU is that kind before it
# measures anything.
GATE = ROOT / ".github" / "workflows" / "gpu-gate.yml"
BLESS = ROOT / ".github" / "workflows" / "bless.yml"
FLEET = [GATE, BLESS]
KIND_CHECK = "Check the runner's kind"
# What speedgate names a multi-GPU file (hardware.multi_gpu_key): blessed and gated by its kind's runner.
MULTI_GPU = re.compile(r"(?P<gpus>\d+)x-(?P<key>.+)")


KIND_CHECK_SCRIPT = ROOT / ".github" / "scripts" / "check-runner-kind.sh"


def kind_check(workflow: Path) -> str:
    """The kind-check step's command: the one script both workflows share, run from the repository's root."""
    found = re.search(r"^\s+run: (.+)$", step(workflow.read_text(), KIND_CHECK), re.MULTILINE)
    assert found and found[1].strip() == f"bash {KIND_CHECK_SCRIPT.relative_to(ROOT)}", (
        f"{workflow.name}: the kind check must run {KIND_CHECK_SCRIPT.relative_to(ROOT)}")
    return found[1].strip()


def steps(text: str) -> list[str]:
    """A workflow's steps, in order, each as its text (from its '- name:' or '- uses:' to the next step)."""
    return re.split(r"^(?=\s+- (?:name|uses): )", text, flags=re.MULTILINE)[1:]


def step(text: str, name: str) -> str:
    found = [s for s in steps(text) if re.match(rf"\s+- name: {re.escape(name)}\s*$", s.splitlines()[0])]
    assert len(found) == 1, f"no single step named {name!r}"
    return found[0]


def script(step_text: str) -> str:
    """A step's `run: |` block, dedented."""
    lines = step_text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"\s+run: \|\s*$", line))
    indent = len(lines[start]) - len(lines[start].lstrip())
    body = []
    for line in lines[start + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        body.append(line)
    return textwrap.dedent("\n".join(body)) + "\n"


def gate_keys() -> list[str]:
    return re.findall(r"^\s+- key: (\S+)\s*$", GATE.read_text(), re.MULTILINE)


def bless_default_kinds() -> list[str]:
    inputs = re.search(r"^      kinds:\n(?P<body>(?:        .*\n)+)", BLESS.read_text(), re.MULTILINE)
    assert inputs, "bless.yml has no `kinds` input"
    default = re.search(r'^\s+default: "(.*)"$', inputs["body"], re.MULTILINE)
    assert default, "bless.yml's `kinds` input has no default"
    return default[1].split()


def baseline_kinds() -> set[str]:
    """The GPU kinds that have a baseline file, multi-GPU files counted under their kind."""
    kinds = set()
    for path in (ROOT / "baselines").glob("*.json"):
        multi = MULTI_GPU.fullmatch(path.stem)
        kinds.add(multi["key"] if multi else path.stem)
    return {k for k in kinds if not k.startswith("cpu-")}


def fake_python(tmp_path: Path, body: str) -> dict[str, str]:
    """An environment whose `python` is a shell script: the workflow's steps run with it instead of speedgate's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(f"#!/bin/sh\n{body}\n")
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEEDGATE_")}
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    return env


def run_bash(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # The runner's `shell: bash` (and its default shell, less pipefail).
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", code], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_the_gate_runs_each_kind_that_has_a_baseline_file() -> None:
    keys = gate_keys()
    assert keys, "gpu-gate.yml has no `- key:` matrix entries"
    assert len(keys) == len(set(keys)), f"gpu-gate.yml lists a kind twice: {keys}"
    for key in keys:
        assert validate_key(key) == key
        multi = MULTI_GPU.fullmatch(key)
        assert not multi, (f"gpu-gate.yml: {key} is a multi-GPU key, which no runner's GPU has: list its kind, "
                           f"{multi and multi['key']}, on a runner with the GPUs")
        # Strict: a kind without its file fails every case; bless it first (docs/running.md).
        assert (ROOT / "baselines" / f"{key}.json").is_file(), f"gpu-gate.yml gates {key}, which has no baselines/{key}.json"
    ungated = sorted(baseline_kinds() - set(keys))
    assert not ungated, f"baselines/ holds the files of {ungated}, which gpu-gate.yml does not gate: add them to its matrix"


def test_a_plain_bless_re_blesses_every_gated_kind() -> None:
    # bless.yml takes any hardware key (a new kind is blessed before it is gated); its default is the gate's kinds.
    assert bless_default_kinds() == gate_keys()
    assert re.search(r"^\s+key: \$\{\{ fromJSON\(needs\.kinds\.outputs\.keys\) \}\}$", BLESS.read_text(), re.MULTILINE)


@pytest.mark.parametrize(("kinds", "problem"), [
    ("nvidia-h100-80gb-hbm3  nvidia-h200 nvidia-h200", None),
    ("nvidia-b200", None),  # a new kind: no file yet, blessed to make one
    ("2x-nvidia-h200", "bless nvidia-h200 on a runner with its GPUs"),
    ("nvidia-h200 ../nvidia-h100-80gb-hbm3", "'../nvidia-h100-80gb-hbm3' is not a hardware key"),
    ("NVIDIA-H200", "'NVIDIA-H200' is not a hardware key"),
    ("", "name at least one kind"),
])
def test_bless_takes_only_hardware_keys_of_one_gpu(tmp_path: Path, kinds: str, problem: str | None) -> None:
    kinds_step = step(BLESS.read_text(), "The kinds to bless")
    assert re.search(r"^\s+shell: python$", kinds_step, re.MULTILINE)
    assert re.search(r"^\s+KINDS: \$\{\{ inputs\.kinds \}\}$", kinds_step, re.MULTILINE)
    output = tmp_path / "github_output"
    proc = subprocess.run([sys.executable, "-c", script(kinds_step)], env=dict(os.environ, KINDS=kinds, GITHUB_OUTPUT=str(output)),
                          capture_output=True, text=True, timeout=60)
    if problem is None:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        written = dict(line.split("=", 1) for line in output.read_text().splitlines())
        assert json.loads(written["keys"]) == list(dict.fromkeys(kinds.split()))
    else:
        assert proc.returncode != 0
        assert problem in proc.stdout
        assert not output.exists() or not output.read_text()


@pytest.mark.parametrize("workflow", FLEET, ids=lambda p: p.name)
def test_each_kind_runs_on_runners_labelled_with_its_key(workflow: Path) -> None:
    text = workflow.read_text()
    labels = re.findall(r"^\s+runs-on: \[(.*)\]$", text, re.MULTILINE)
    gpu_jobs = [[label.strip().strip('"') for label in job.split(",")] for job in labels if "gpu" in job]
    assert len(gpu_jobs) == 1, f"{workflow.name}: expected one GPU job, found runs-on {labels}"
    assert gpu_jobs[0] == ["self-hosted", "linux", "gpu", "${{ matrix.key }}"]
    assert re.search(r"^\s+fail-fast: false\b", text, re.MULTILINE), f"{workflow.name}: one kind's failure cancels the others"
    assert re.search(r"^\s+KIND: \$\{\{ matrix\.key \}\}$", text, re.MULTILINE)


@pytest.mark.parametrize("workflow", FLEET, ids=lambda p: p.name)
def test_the_kind_check_runs_after_the_install_and_before_any_pytest(workflow: Path) -> None:
    texts = steps(workflow.read_text())
    names = [re.sub(r"^\s+- (?:name|uses): ", "", s.splitlines()[0]) for s in texts]
    check = names.index(KIND_CHECK)
    assert check > names.index("Install into a venv"), f"{workflow.name}: the check needs speedgate installed"
    runs_pytest = [i for i, s in enumerate(texts) if "-m pytest" in s]
    assert runs_pytest and min(runs_pytest) > check, f"{workflow.name}: pytest runs before the runner's kind is checked"
    assert re.search(r"^\s+id: kind$", texts[check], re.MULTILINE)
    # Nothing of a runner of another kind is uploaded or summarized as this kind's.
    for i, s in enumerate(texts):
        if i > check and re.search(r"^\s+if: always\(\)", s, re.MULTILINE):
            assert "steps.kind.outcome == 'success'" in s, f"{workflow.name}: {names[i]} runs after a failed kind check"


@pytest.mark.parametrize("workflow", FLEET, ids=lambda p: p.name)
@pytest.mark.parametrize(("found", "override", "passes"), [
    ("nvidia-h200", None, True),
    ("nvidia-h100-80gb-hbm3", None, False),  # a mislabelled runner
    ("nvidia-h200-mig", None, False),  # the right card, in MIG mode: another key, another file
    ("nvidia-h200", "nvidia-h100-80gb-hbm3", False),  # the runner's environment would move the run to another file
    ("nvidia-h200", "nvidia-h200", True),
])
def test_the_kind_check_fails_naming_both_keys(tmp_path: Path, workflow: Path, found: str, override: str | None,
                                               passes: bool) -> None:
    env = fake_python(tmp_path, f"echo {found}")
    env["KIND"] = "nvidia-h200"
    if override is not None:
        env["SPEEDGATE_HARDWARE_KEY"] = override
    proc = run_bash(kind_check(workflow), env, ROOT)
    if passes:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    else:
        assert proc.returncode != 0
        message = next(line for line in proc.stdout.splitlines() if line.startswith("::error::"))
        assert "labelled nvidia-h200," in message or "labelled nvidia-h200 and" in message
        assert f"hardware key is {found}" in message
        if override is not None:
            assert f"SPEEDGATE_HARDWARE_KEY={override}" in message


@pytest.mark.parametrize("workflow", FLEET, ids=lambda p: p.name)
def test_the_kind_check_computes_speedgates_own_key(workflow: Path) -> None:
    kind_check(workflow)  # both workflows run the one script
    code = re.findall(r'python -c "([^"]+)"', KIND_CHECK_SCRIPT.read_text())
    assert len(code) == 1
    # Run for real, on this machine's CPU: it prints the key a run here would use.
    proc = subprocess.run([sys.executable, "-c", code[0]], env=dict(os.environ, CUDA_VISIBLE_DEVICES=""),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == hardware_key(cpu_hardware())


@pytest.mark.parametrize("workflow", FLEET, ids=lambda p: p.name)
def test_each_kind_uploads_under_its_own_name(workflow: Path) -> None:
    uploads = [s for s in steps(workflow.read_text()) if "actions/upload-artifact@" in s]
    assert uploads
    for upload in uploads:
        name = re.search(r"^\s+name: (.+)$", upload, re.MULTILINE)
        assert name and "${{ matrix.key }}" in name[1], f"{workflow.name}: the kinds' artifacts overwrite each other"


def test_bless_uploads_its_kinds_files_only() -> None:
    upload = next(s for s in steps(BLESS.read_text()) if "actions/upload-artifact@" in s)
    patterns = [line.strip() for line in upload.split("path: |", 1)[1].splitlines() if line.strip().startswith("baselines/")]
    files = [p.name for p in (ROOT / "baselines").glob("*.json")]
    for key in {*gate_keys(), "nvidia-b200"}:
        ours = {f for f in files if f == f"{key}.json" or (m := MULTI_GPU.fullmatch(f[:-5])) and m["key"] == key}
        matched = {f for f in files for p in patterns if fnmatch.fnmatchcase(f, p.replace("${{ matrix.key }}", key).split("/", 1)[1])}
        assert matched == ours, f"{key}: bless.yml's upload takes {sorted(matched)}, its kind's files are {sorted(ours)}"


@pytest.mark.parametrize(("calibrate", "select"), [("3", ""), ("5", "triton and not attention"), ("", "nccl")])
def test_the_calibrate_input_reaches_pytest(tmp_path: Path, calibrate: str, select: str) -> None:
    text = BLESS.read_text()
    calibrate_input = re.search(r"^      calibrate:\n(?P<body>(?:        .*\n)+)", text, re.MULTILINE)
    assert calibrate_input and re.search(r'^\s+default: "3"$', calibrate_input["body"], re.MULTILINE)
    assert re.search(r"^\s+CALIBRATE: \$\{\{ inputs\.calibrate \}\}$", text, re.MULTILINE)
    assert re.search(r"^\s+SELECT: \$\{\{ inputs\.select \}\}$", text, re.MULTILINE)
    record = tmp_path / "record"
    env = fake_python(tmp_path, f'printf "%s\\n" "$@" > {record}\necho "$TRITON_CACHE_DIR" >> {record}.env\n'
                                f'echo "$TORCHINDUCTOR_CACHE_DIR" >> {record}.env')
    runner_temp = tmp_path / "runner_temp"
    runner_temp.mkdir()
    env.update(CALIBRATE=calibrate, SELECT=select, RUNNER_TEMP=str(runner_temp),
               TRITON_CACHE_DIR="/tool-cache/triton", TORCHINDUCTOR_CACHE_DIR="/tool-cache/inductor")
    proc = run_bash(script(step(text, "Re-bless")), env, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    args = record.read_text().splitlines()
    caches = Path(f"{record}.env").read_text().splitlines()
    assert args[:4] == ["-m", "pytest", "perftests", "-p"] and "--update-baselines" in args
    if select:
        assert args[args.index("-k") + 1] == select
    else:
        assert "-k" not in args
    if calibrate:
        assert args[args.index("--speedgate-calibrate") + 1] == calibrate
        # Each calibrating process starts with empty compile caches of its own, not the runner's.
        assert all(Path(c).parent == runner_temp and Path(c).is_dir() and not any(Path(c).iterdir()) for c in caches)
    else:
        assert "--speedgate-calibrate" not in args
        assert caches == ["/tool-cache/triton", "/tool-cache/inductor"]
