"""One function knows the usable cores: the affinity mask, capped by a cgroup CPU quota."""

import os

from commbench.measure.cores import cgroup_cpu_quota, usable_cores


def test_affinity_counts_without_a_quota(tmp_path):
    assert usable_cores(tmp_path) == len(os.sched_getaffinity(0))


def test_a_cgroup_v2_quota_on_the_process_path_caps_the_cores(tmp_path):
    (tmp_path / "cpu.max").write_text("max 100000\n")
    job = tmp_path / "slurm" / "job_1"
    job.mkdir(parents=True)
    (job / "cpu.max").write_text("150000 100000\n")  # 1.5 cores: ranks may use 2 threads' worth at most
    assert cgroup_cpu_quota(tmp_path, "/slurm/job_1") == 1.5
    assert cgroup_cpu_quota(tmp_path, "/") is None  # "max": no quota


def test_a_cgroup_v1_quota_caps_the_cores(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(tmp_path, "/") == 1.0
    assert usable_cores(tmp_path) == 1
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")  # unlimited
    assert cgroup_cpu_quota(tmp_path, "/") is None
