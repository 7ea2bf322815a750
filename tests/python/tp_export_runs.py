"""Shared by the tensor-parallel export tests (test_export_tp.py, test_export_tp_vit.py): one config
trained in one process and under `trainer launch -n 2` at dist.tensor_parallel 2, each run's final
checkpoint exported. Not a test itself (the ctest glob takes test_*.py only)."""
import os
import subprocess


def export_single_and_tp(bin_path, work, cfg):
    """{"single": path, "tp": path} of the two exports, or None after printing why a run failed."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    exported = {}
    for mode in ("single", "tp"):
        out = os.path.join(work, mode)
        cmd = [bin_path, "run", cfg] if mode == "single" else \
            [bin_path, "launch", "-n", "2", "--", "run", cfg, "--set", "dist.tensor_parallel=2"]
        run = subprocess.run(cmd + ["--out-dir", out], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
        if run.returncode != 0:
            print(run.stdout[-3000:])
            print(f"FAILED: the {mode} run exited {run.returncode}")
            return None
        path = os.path.join(work, f"{mode}.safetensors")
        subprocess.run([bin_path, "export", os.path.join(out, "tiny", "checkpoints"), "--out", path], env=env,
                       check=True)
        exported[mode] = path
    return exported
