"""A page's display status of each logical job, judged for a whole frame at once, is what
`cell_status` and `stats.is_stuck` say of each job alone."""

import datetime as dt

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from hud import stats
from hud.pages.common import cell_status, logical_with_status

NOW = dt.datetime(2026, 12, 7, 12, tzinfo=dt.UTC)
_TIMES = st.datetimes(
    min_value=dt.datetime(2026, 12, 6),
    max_value=dt.datetime(2026, 12, 7, 12),
    timezones=st.just(dt.UTC),
)
_JOBS = st.lists(
    st.fixed_dictionaries(
        {
            "status": st.sampled_from(["completed", "in_progress"]),
            "row_status": st.sampled_from(["completed", "in_progress"]),
            "conclusion": st.sampled_from(["", "success", "failure", "timed_out", "cancelled"]),
            "placed_at": _TIMES,
            "in_progress_received_at": st.none() | _TIMES,
        }
    ),
    max_size=30,
)


@given(jobs=_JOBS)
def test_a_frames_display_statuses_are_each_jobs_own(jobs):
    frame = pd.DataFrame(jobs, columns=["status", "row_status", "conclusion", "placed_at",
                                        "in_progress_received_at"])  # fmt: skip
    for column in ("placed_at", "in_progress_received_at"):
        frame[column] = pd.to_datetime(frame[column], utc=True)

    shown = logical_with_status(frame, NOW)["display"].tolist()

    assert shown == [
        cell_status(
            job["status"],
            job["conclusion"],
            stats.is_stuck(
                job["row_status"], job["in_progress_received_at"], job["placed_at"], NOW
            ),
        )
        for job in jobs
    ]
