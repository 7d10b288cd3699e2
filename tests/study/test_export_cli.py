"""`autotune status` and `autotune export` on a study with confirmation runs: the evidence is shown.

The study is run in-process on the simulator (the flagship space, a 100-request benchmark,
12 trials of which the last 3 confirm 3 finalists once each: a quarter of the budget) into a
run directory, then read back by the CLI exactly as after `autotune run`.
"""

from __future__ import annotations

import json

import optuna
import yaml

from autotune.backends.sim import SimBackend
from autotune.rundir import RunDir
from autotune.space import load_space
from autotune.study.loop.driver import TrialLoop
from autotune.study.loop.opening import open_study
from autotune.study.search.samplers import make_sampler
from autotune.study.storages.storage import storage_from_url
from tests.conftest import REPO, run_cli
from tests.study.test_confirm import two_workers

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _confirmed_run_dir(tmp_path) -> RunDir:
    path = tmp_path / "space.yaml"
    d = yaml.safe_load((REPO / "search_spaces" / "qwen72b.yaml").read_text())
    d["workload"]["num_requests"] = 100
    d["study"] = {"name": "cli", "trials": 12, "seed": 1}
    path.write_text(yaml.safe_dump(d))
    space = load_space(path)
    rd = RunDir(tmp_path / "run").ensure()
    rd.space_copy.write_text(yaml.safe_dump(space.model_dump(mode="json"), sort_keys=False))
    study = open_study(space, "cli", storage_from_url(rd.optuna_url), make_sampler("autotune", space, 1)).study
    TrialLoop(study, space, two_workers(run=SimBackend().run_trial), target=12, seed=1).run()
    return rd


def test_status_and_export_show_what_the_runs_support(tmp_path, capsys):
    rd = _confirmed_run_dir(tmp_path)
    code, out, err = run_cli(["status", "--out", str(rd.root), "--json"], capsys)
    assert code == 0, err
    st = json.loads(out)
    confirms = [t for t in st["trials"] if t["role"] == "confirm"]
    assert len(confirms) == 3 and all(t["repeat_of"] is not None for t in confirms)
    configs = {c["trials"][0]: c for c in st["configs"]}
    assert sorted(configs) == sorted({t["repeat_of"] for t in confirms})
    for c in configs.values():
        assert c["runs"] == 2 and c["requests"] == 200 and c["confirmed"]
        low, high = c["metrics"]["p99_e2e_s"]["ci95"]
        assert low < c["metrics"]["p99_e2e_s"]["mean"] < high
        assert c["oom_per_1k_upper95"] > 0  # an upper bound, never "0 so at most 0"

    code, out, err = run_cli(["status", "--out", str(rd.root)], capsys)
    assert code == 0, err
    assert "configs measured more than once" in out and "(repeats trial" in out

    target = tmp_path / "deploy.yaml"
    code, out, err = run_cli(["export", "--out", str(rd.root), "-o", str(target)], capsys)
    assert code == 0, err
    chosen = int(out.split()[1].rstrip(":"))
    assert chosen in configs  # a confirmed config
    head = [line for line in target.read_text().splitlines() if line.startswith("#")]
    text = "\n".join(head)
    assert "SIMULATED" in text and "confirmed configs" in text
    assert f"# evidence: 2 runs of this config (trials {', '.join(map(str, configs[chosen]['trials']))})" in text
    assert "200 requests in all" in text and "95 % interval" in text
    # 0 OOMs in 200 requests cannot show 1 per 1000: said, with the requests that would.
    assert "NOT shown within the limit of 1" in text and "2795 more requests" in text
    # 12 trials leave the search 6 samples for 7 flags: the header and the command say so.
    assert "# budget too small to search every flag: 12 trials = 3 warm start + 6 sampled + 3 confirmation" in text
    assert "--trials 14 gives it 8" in text and "budget too small to search every flag" in out
    assert "memory headroom per GPU:" in text and "required margin 1 GiB" in text
    # The sim records its engine deaths per run: the header bounds a run's chance of one.
    assert f"# engine deaths: in {configs[chosen]['runs_with_engine_death']} of 2 runs" in text
    assert "NOT shown within the limit of 1" in out  # the command says it too
    cfg = yaml.safe_load(target.read_text())
    assert cfg["model"] == "Qwen/Qwen2.5-72B-Instruct"

    # The k8s export from the CLI: the cache and the GPU pin the options ask for.
    k8s = tmp_path / "k8s.yaml"
    code, out, err = run_cli(["export", "--out", str(rd.root), "--format", "k8s", "-o", str(k8s),
                              "--model-cache", "emptydir", "--gpu-product", "NVIDIA-A100-SXM4-80GB"], capsys)
    assert code == 0, err
    docs = [d for d in yaml.safe_load_all(k8s.read_text()) if d]
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert any("emptyDir" in v for v in pod["volumes"])
    assert not any(d["kind"] == "PersistentVolumeClaim" for d in docs)
    assert "***" not in k8s.read_text()
