"""The demo's cast and its dice: the backends, what they run, what fails, and when.

Everything the history is made of but not how it is replayed (`hud.ops.demo.runs`): the
allowlists before and after, each backend's profile, the failures each job can show, the
broken-trunk spell and the PRs that truly break a test. Random choices take the demo's seeded
generator; choices that must not move the rest of the history are made by a hash instead.
"""

import hashlib
import random
from dataclasses import dataclass

UPSTREAM = "pytorch/pytorch"
DAYS = 42
EVALUATED_DAYS = 6


ALLOWLIST_BEFORE = """\
# CRCR allowlist (demo). Levels: L1 forwarded only, L2 on the HUD,
# L3 non-blocking check runs with ciflow/crcr/<device>, L4 blocking.
L1:
  - example-labs/torch-hpu-preview
  - rebellions/torch-rbln
L2:
  - tenstorrent/tt-torch
  - furiosa/torch-rngd
  - ibm/torch-spyre: spyre-oncall-a
  - pytorch/crcr-test  # the relay's probe: proves events reach a backend and results return
L3:
  npu:
    ascend/torch-npu: [npu-oncall-a, npu-oncall-b]
L4: []
"""

ALLOWLIST_NOW = """\
# CRCR allowlist (demo). Levels: L1 forwarded only, L2 on the HUD,
# L3 non-blocking check runs with ciflow/crcr/<device>, L4 blocking.
L1:
  - example-labs/torch-hpu-preview
L2:
  - tenstorrent/tt-torch
  - furiosa/torch-rngd
  - rebellions/torch-rbln  # onboarded ten days ago
  - pytorch/crcr-test  # the relay's probe: proves events reach a backend and results return
L3:
  spyre:
    ibm/torch-spyre: [spyre-oncall-a]
L4:
  - ascend/torch-npu: npu-oncall-a, npu-oncall-b
"""


@dataclass(frozen=True)
class Profile:
    """How a demo backend behaves."""

    repo: str
    jobs: tuple[str, ...]
    pass_rate: float
    queue_minutes: tuple[int, int]
    run_minutes: tuple[int, int]
    first_day: int = DAYS
    flaky_job: str = ""
    infra_day: int | None = None


PROFILES = (
    Profile(
        "ascend/torch-npu",
        ("build", "test-ops", "test-nn", "test-distributed"),
        0.96,
        (2, 12),
        (45, 110),
        infra_day=12,
    ),
    Profile("ibm/torch-spyre", ("build", "test-core", "test-inductor"), 0.94, (5, 25), (30, 90)),
    Profile(
        "tenstorrent/tt-torch",
        ("build", "test-models", "test-ops"),
        0.985,
        (3, 15),
        (25, 70),
        flaky_job="test-models",
    ),
    Profile("furiosa/torch-rngd", ("build", "test-ops"), 0.80, (20, 55), (60, 170)),
    Profile(
        "rebellions/torch-rbln", ("build", "test-smoke"), 0.95, (4, 10), (20, 40), first_day=10
    ),
)

# The relay's probe backend (settings.CRCR_PROBE_REPO): one short job on every delivery. It has
# its own generator and run ids, so adding it leaves the other backends' history unchanged.
PROBE = Profile("pytorch/crcr-test", ("relay-probe",), 0.985, (0, 2), (1, 3))
PROBE_SEED = 20261130
# PR authors (pull_request.user.login), picked by the PR number so the generator is untouched.
AUTHORS = ("ezyang", "malfet", "albanD", "jansel", "huydhn", "kwen2501", "nWEIdia")

FAILURES = {
    "test-ops": [
        (
            "test_ops.TestCommonPRIVATEUSE1",
            "test_out_addmm_float32",
            "AssertionError: Tensor-likes are not close!\n\nMismatched elements: 3 / 64",
        ),
        (
            "test_ops.TestMathBitsPRIVATEUSE1",
            "test_conj_view_linalg_svd_complex64",
            "RuntimeError: linalg.svd: not implemented for this device",
        ),
    ],
    "test-nn": [
        (
            "test_nn.TestNNDeviceTypePRIVATEUSE1",
            "test_LayerNorm_general",
            "AssertionError: Scalars are not close!\nExpected 0.0 but got 1.2e-05",
        )
    ],
    "test-distributed": [
        (
            "distributed.test_c10d",
            "test_allreduce_coalesced",
            "RuntimeError: HCCL error: remote process exited or there was a network error",
        )
    ],
    "test-core": [
        (
            "test_torch.TestTorchDeviceType",
            "test_copy_all_dtypes_and_devices",
            "AssertionError: False is not true : device mismatch",
        )
    ],
    "test-inductor": [
        (
            "inductor.test_torchinductor.GPUTests",
            "test_softmax",
            "torch._inductor.exc.InductorError: LoweringException",
        )
    ],
    "test-models": [
        (
            "models.test_resnet.TestResNet",
            "test_resnet50_train_step",
            "AssertionError: loss diverged after 3 steps (nan)",
        )
    ],
    "test-smoke": [
        ("smoke.test_basic.TestSmoke", "test_tensor_roundtrip", "RuntimeError: device not found")
    ],
    "build": [("build", "compile", "error: no matching function for call to 'at::empty'")],
}
INFRA_MESSAGE = "runner lost communication with the server (ConnectionResetError)"
# A broken-trunk spell (days ago, inclusive): from day 20 to day 18 an upstream change breaks
# one test of torch-spyre's test-core on every commit, trunk and PRs alike, until fixed.
TRUNK_BREAK = ("ibm/torch-spyre", "test-core", range(18, 21))
TRUNK_BREAK_TEST = (
    "test_torch.TestTorchDeviceType",
    "test_index_put_accumulate_large_tensor",
    "RuntimeError: index_put_ with accumulate=True: expected 0 mismatches, got 12",
)
# PRs that truly break a test: about 1 in 12, on every backend running test-ops for half of
# them (corroborated) and on the L4 backend alone for the others. Chosen by a hash of the PR
# number, not the demo's generator, so the rest of the history stays the same.
PR_BREAK_EVERY = 12
PR_BREAK_JOB = "test-ops"
# Backends whose workflow sends a self-reported `triage_verdict` with each failure.
SELF_TRIAGING = ("ascend/torch-npu",)


def sha_of(*parts: object) -> str:
    """A stable fake SHA (and delivery id) named by its parts."""
    return hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()  # noqa: S324


def pr_title(rng: random.Random, number: int) -> str:
    """A believable PR title (two choices of the generator)."""
    verbs = ["Fix", "Add", "Refactor", "Speed up", "Remove", "Support"]
    things = [
        "addmm decomposition",
        "inductor lowering for softmax",
        "c10d coalesced ops",
        "PrivateUse1 autocast",
        "meta kernel for svd",
        "layer_norm backward",
    ]
    return f"[{number % 7}] {rng.choice(verbs)} {rng.choice(things)}"


def job_result(
    rng: random.Random, profile: Profile, job: str, day: int
) -> tuple[str, list[tuple[str, str, str]]]:
    """A job's conclusion and failed tests on `day`: the profile's dice, its infra day, the
    broken-trunk spell."""
    if profile.infra_day is not None and day == profile.infra_day:
        return "failure", [("infra", "runner", INFRA_MESSAGE)]
    roll = rng.random()
    if roll < profile.pass_rate:
        conclusion, failures = "success", []
    elif roll < profile.pass_rate + (1 - profile.pass_rate) * 0.1:
        conclusion, failures = rng.choice(["cancelled", "timed_out"]), []
    else:
        options = FAILURES.get(job, FAILURES["build"])
        conclusion, failures = "failure", rng.sample(options, k=rng.randint(1, len(options)))
    repo, broken_job, days = TRUNK_BREAK
    if (profile.repo, job) == (repo, broken_job) and day in days:
        return "failure", [TRUNK_BREAK_TEST, *failures]
    return conclusion, failures


def pr_breakage(repo: str, job: str, pr_number: int) -> tuple[str, str, str] | None:
    """The test a demo PR truly breaks on this backend's job, if it breaks one."""
    digest = int(sha_of("breaks", pr_number)[:8], 16)
    if job != PR_BREAK_JOB or digest % PR_BREAK_EVERY:
        return None
    corroborated = digest // PR_BREAK_EVERY % 2 == 0
    if not corroborated and repo != PROFILES[0].repo:
        return None
    return (
        "test_ops.TestCommonPRIVATEUSE1",
        f"test_pr{pr_number}_out_addmm_float32",
        "AssertionError: Tensor-likes are not close! (a change in this PR)",
    )
