"""Edges of the monitoring policy's checks (plugins/plugin_utils/sglang_alerts.Policy.from_vars): the error ratio the
refusal of a loose availability SLO quotes is rounded to six decimals. The SLO values are synthetic."""

from __future__ import annotations

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_alerts import MonitoringError, Policy


def test_the_quoted_error_ratio_is_rounded_to_six_decimals() -> None:
    """14.4 x (1 - 0.9000001) = 1.43999856: quoted as 1.439999, not with a seventh decimal."""
    with pytest.raises(MonitoringError) as error:
        Policy.from_vars({"availability_slo": 0.9000001})
    assert str(error.value) == (
        "sglang_monitoring_availability_slo=0.9000001: the 1h page fires at 14.4x the error budget, an error ratio "
        "of 1.439999: above 1, it can never fire; fix: declare more than 0.9306"
    )
