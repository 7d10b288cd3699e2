"""`autotune run` assembled: the default Ray worker pool, the callbacks, the run directory.

The trial loop (autotune.study.loop.driver) is given everything it works with; this module
decides what that is for a real run: a study in the run directory's storage (or the
space's), Ray actors on GPU groups, trial files, MLflow and progress output. Everything
that can refuse the run is checked before anything is written.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from autotune.backend_kinds import is_simulated, needs_gpus
from autotune.calibrate import screen_wrapper
from autotune.calibrate.screen import unaided_note
from autotune.errors import UserError, no_space_error
from autotune.files import write_atomic
from autotune.rundir import RunDir
from autotune.security import mask_env, mask_url, secret_values
from autotune.space import SearchSpace, space_fingerprint
from autotune.study.analysis import pareto_numbers
from autotune.study.display import MODES, Progress
from autotune.study.loop import Callback, TrialFiles, TrialLoop, open_study
from autotune.study.search import budget_note, make_sampler
from autotune.study.storages import check_url, expand_url, storage_from_url
from autotune.study.trials import records
from autotune.tracking.callback import MlflowLogger
from autotune.workers.cluster import ClusterInfo, connect, disconnect, plan_workers
from autotune.workers.pool import WorkerPool


@dataclass
class RunOptions:
    out: Path | None = None
    study_name: str | None = None
    trials: int | None = None
    workers: int | None = None
    seed: int | None = None
    address: str | None = None
    # auto (rich on a terminal, else plain), rich, plain or none; False: none, True: auto.
    progress: str | bool = "auto"
    stale_after_s: float = 120.0
    backend_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunSummary:
    study: str
    run_dir: Path
    n_complete: int
    n_failed: int
    n_rejected: int
    pareto: list[int]
    workers: int
    wall_s: float
    launched: int


def study_name_for(space: SearchSpace, space_path: Path, override: str | None) -> str:
    return override or space.study.name or space_path.stem


def run_study(space: SearchSpace, space_path: Path, opts: RunOptions) -> RunSummary:
    """Run (or resume) the study ``space`` describes until it holds its target of trials."""
    t0 = time.time()
    name = study_name_for(space, space_path, opts.study_name)
    run_dir = RunDir(opts.out or Path("runs") / name)
    seed = space.study.seed if opts.seed is None else opts.seed
    mode = _progress_mode(opts.progress)
    _refuse_if_held(run_dir)  # before starting Ray: a second driver is refused in a second, not ten
    _refuse_another_study(run_dir, name)
    info, n_workers = _preflight(space, opts, seed)
    sigterm = _SigtermStop()  # after ray.init, which installs a handler of its own
    try:
        try:
            run_dir.ensure()
            with _driver_lock(run_dir):
                return _run_locked(space, space_path, opts, name, run_dir, seed, mode, n_workers, t0)
        finally:
            sigterm.ignore()  # the shutdown runs to its end, whatever signal comes now
            disconnect(info)
            sigterm.restore()
    except KeyboardInterrupt:
        if not sigterm.received:
            raise  # Ctrl-C: the command line says "interrupted"
        raise Stopped(f"stopped by SIGTERM: workers and Ray shut down, trials that were running are re-run on "
                      f"resume; run the same command again to resume the study in {run_dir.root}") from None
    except Exception as e:
        full = no_space_error(e)
        if full is None or isinstance(e, UserError):
            raise
        raise UserError(_no_space_message(full, run_dir)) from None


class Stopped(UserError):
    exit_code = 128 + signal.SIGTERM  # 143, as a process killed by SIGTERM reports


class _SigtermStop:
    """SIGTERM raises KeyboardInterrupt in the main thread: the trial loop stops as on Ctrl-C
    (its invocation run ends KILLED, the workers are closed) and Ray is shut down, where
    Ray's own handler aborts the process, printing a C++ stack, and leaves its agents behind.
    ``received`` tells the two apart (Ray re-raises an interrupt as a plain KeyboardInterrupt)."""

    def __init__(self) -> None:
        self.received = False
        self._active = threading.current_thread() is threading.main_thread()  # handlers: main thread only
        self._previous: Any = signal.signal(signal.SIGTERM, self._handle) if self._active else None

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = True
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the shutdown short
        raise KeyboardInterrupt

    def ignore(self) -> None:
        if self._active:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def restore(self) -> None:
        # Ray's handler is C code (getsignal says None) and cannot be put back: the default then.
        if self._active:
            signal.signal(signal.SIGTERM, self._previous if self._previous is not None else signal.SIG_DFL)


def _no_space_message(full: BaseException, run_dir: RunDir) -> str:
    """One line for a full disk, naming what could not be written. SQLite's error names no
    file; the run directory holds its stores (or study.storage names them)."""
    path = getattr(full, "filename", None) or run_dir.root
    return (f"no space left on device writing {path}; free space there and run the same command again: "
            "the study resumes where it stopped (completed trials are kept, MLflow is repaired)")


def _run_locked(space: SearchSpace, space_path: Path, opts: RunOptions, name: str, run_dir: RunDir, seed: int,
                mode: str, n_workers: int, t0: float) -> RunSummary:
    """The run itself, by the one driver holding the run directory's lock: the stores are
    created and written here only."""
    storage_url = expand_url(space.study.storage) if space.study.storage else run_dir.optuna_url
    mlflow_uri = space.study.mlflow_tracking_uri
    mlflow_uri = expand_url(mlflow_uri, "study.mlflow_tracking_uri") if mlflow_uri else run_dir.mlflow_url
    target = opts.trials or space.study.trials
    storage = storage_from_url(storage_url)
    sampler = make_sampler(space.study.sampler, space, seed, wrap=screen_wrapper)
    opened = open_study(space, name, storage, sampler, target=target)
    # Every run rewrites the copy: a resume may change what the fingerprint leaves free (export,
    # confirmation, trials), and status and export read the copy while MLflow is told this space.
    try:
        write_atomic(run_dir.space_copy, yaml.safe_dump(_masked_space(space, space_path, name), sort_keys=False))
    except OSError as e:
        if no_space_error(e) is not None:
            raise  # the full-disk message below
        raise UserError(f"{run_dir.space_copy}: cannot write the run's copy of the space ({e.strerror}); "
                        "make the run directory writable") from None
    note = budget_note(space, target)  # said at the start (here and by `run`), in status and the export header
    unaided = unaided_note(space)  # said at the start: the sweep and the screen are off, and why
    g, c = space.cluster.gpus_per_worker, space.cluster.cpus_per_worker
    callbacks: list[Callback] = [
        TrialFiles(run_dir),
        MlflowLogger(mlflow_uri, run_dir, _invocation_params(space, name, target, n_workers, seed, run_dir),
                     {"backend": space.engine.backend}),
    ]
    if mode != "none":
        callbacks.append(Progress(
            f"backend {space.engine.backend}, {n_workers} worker(s) x {g} GPU(s), sampler {space.study.sampler}; "
            f"run dir {run_dir.root}" + "".join(f"\n{n}" for n in (note, unaided) if n), mode))
    pool = WorkerPool(space.engine.backend, n_workers, g, c, _backend_kwargs(space, opts))
    loop = TrialLoop(
        opened.study, space, pool,
        target=target, seed=seed, callbacks=callbacks, stale_after_s=opts.stale_after_s,
        secrets=secret_values(space.engine.env, [space.study.storage, space.study.mlflow_tracking_uri,
                                                 storage_url, mlflow_uri]),
    )
    res = loop.run()
    t = res.tally
    # A trial that never served (its engine did not start) is complete to Optuna but failed to
    # a user: counted as `autotune status` counts it.
    never = sum(r.never_served for r in records(opened.study.get_trials(deepcopy=False)))
    return RunSummary(name, run_dir.root, t.complete - never, t.failed + never, t.rejected,
                      pareto_numbers(opened.study), n_workers, time.time() - t0, res.launched)


# One driver per run directory. Two drivers on one fresh directory race to create its
# SQLite stores (MLflow's schema migration fails in one of them), and two on one study
# would both write its trial files and its MLflow runs. Drivers that share a study do so
# through a shared database, each with its own --out.
LOCK_NAME = "driver.lock"


@contextmanager
def _driver_lock(run_dir: RunDir) -> Iterator[None]:
    """Hold the run directory's advisory lock (``flock``) while the run lasts.

    The kernel releases it when the process ends, however it ends (a SIGKILL included), so
    a stale lock never blocks; the file stays (deleting it would let a third driver lock a
    new file while a second still holds the old one) and holds the last holder's pid.
    """
    path = run_dir.root / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by children (PEP 446)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(_held_message(run_dir, path)) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
        yield
    finally:
        os.close(fd)


def _refuse_if_held(run_dir: RunDir) -> None:
    """Refuse now if a live driver holds the run directory (creates nothing)."""
    path = run_dir.root / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # no lock file yet (or unreadable): _driver_lock decides
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UserError(_held_message(run_dir, path)) from None
    finally:
        os.close(fd)


def _held_message(run_dir: RunDir, path: Path) -> str:
    holder = ""
    for _ in range(20):  # the holder writes its pid just after locking
        try:
            holder = path.read_text().strip()
        except OSError:
            break
        if holder:
            break
        time.sleep(0.05)
    pid, _, host = holder.partition(" ")
    who = f"pid {pid}" + (f" on {host}" if host and host != socket.gethostname() else "") if pid else "another process"
    return (f"--out {run_dir.root}: another autotune run ({who}) is running on this run directory; "
            "wait for it to end, or stop it, then run again (to share a study between drivers, give each its own --out)")


def _progress_mode(progress: str | bool) -> str:
    if isinstance(progress, bool):
        return "auto" if progress else "none"
    if progress not in MODES:
        raise UserError(f"--progress {progress}: use rich, plain or none (default: rich on a terminal, else plain)")
    return progress


def _backend_kwargs(space: SearchSpace, opts: RunOptions) -> dict[str, Any]:
    """The backend's constructor options. The sim backend runs the space's physics
    (``engine.sim_profile``, else nominal): in a sim study that profile plays reality."""
    kwargs = dict(opts.backend_kwargs)
    if is_simulated(space.engine.backend):
        kwargs.setdefault("profile", space.engine.profile)
    return kwargs


def _preflight(space: SearchSpace, opts: RunOptions, seed: int) -> tuple[ClusterInfo, int]:
    """Everything that can refuse the run, checked before anything is written.

    A bad storage URL, an unknown sampler, an unreachable Ray or too many workers must
    leave no run directory, no study and no MLflow experiment behind.
    """
    if space.study.storage:
        check_url(expand_url(space.study.storage))
    if space.study.mlflow_tracking_uri:
        expand_url(space.study.mlflow_tracking_uri, "study.mlflow_tracking_uri")
    make_sampler(space.study.sampler, space, seed, wrap=screen_wrapper)
    g, c = space.cluster.gpus_per_worker, space.cluster.cpus_per_worker
    requested = opts.workers or space.cluster.workers
    logical = None
    if not needs_gpus(space.engine.backend) and not opts.address and g > 0:
        logical = (requested or 2) * g  # the simulator runs on CPUs but keeps the GPU placement path
    info = connect(opts.address or space.cluster.address, logical_gpus=logical)
    try:
        return info, plan_workers(requested, g, c, info)
    except BaseException:
        disconnect(info)
        raise


def _invocation_params(space: SearchSpace, name: str, target: int, n_workers: int, seed: int,
                       run_dir: RunDir) -> dict[str, Any]:
    return {
        "study": name,
        "backend": space.engine.backend,
        "model": space.engine.model,
        "gpu": space.engine.gpu,
        "sampler": space.study.sampler,
        "trials": target,
        "workers": n_workers,
        "seed": seed,
        "storage": mask_url(space.study.storage or run_dir.optuna_url),
        "space_fingerprint": space_fingerprint(space),
        **{f"strategy.{k}": v for k, v in space.study.strategy.model_dump().items()},
    }


def _refuse_another_study(run_dir: RunDir, name: str) -> None:
    """One run directory, one study: its space.yaml is what status and export read, and each run
    rewrites it, so a second study there would give the first one's readers its space. Checked
    before anything is created, as is that the copy can be replaced (a directory in its place)."""
    copy = run_dir.space_copy
    if copy.exists() and not copy.is_file():
        raise UserError(f"{copy}: not a file, and the run writes its copy of the space there; move it aside")
    try:
        saved = yaml.safe_load(copy.read_text())
    except (OSError, yaml.YAMLError):
        return  # none yet (or unreadable: the run that wrote it is this study's, or status says so)
    held = (saved.get("study") or {}).get("name") if isinstance(saved, dict) else None
    if held and held != name:
        raise UserError(f"{run_dir.root} holds study {held!r}; a run directory holds one study: give study "
                        f"{name!r} another --out")


def _masked_space(space: SearchSpace, space_path: Path, name: str) -> dict[str, Any]:
    """The space as saved in the run directory: secrets masked, a trace path made absolute (it
    was relative to the space file; status and export re-read the copy from elsewhere), and the
    study's name as the run gave it (--study, the space's or the file's stem)."""
    d = space.model_dump(mode="json")
    d["study"]["name"] = name
    trace = d["workload"].get("trace")
    if trace and not Path(trace["path"]).expanduser().is_absolute():
        trace["path"] = os.path.abspath(Path(space_path).parent / trace["path"])
    d["engine"]["env"] = mask_env(space.engine.env)
    for key in ("storage", "mlflow_tracking_uri"):
        if d["study"].get(key):
            d["study"][key] = mask_url(d["study"][key])
    return d
