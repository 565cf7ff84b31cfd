"""What every SGLang module's documentation shares: its authors, and check mode in full, no diff, any POSIX host.
A module adds only what differs (check mode details, its options); with ansible.builtin.action_common_attributes
for the attributes' descriptions."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
author: SGLang DeepSeek-V4 deployment maintainers (@sglang-dsv4)
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

    # The options of the modules that wait on a server during a rollout (sglang_engine_gate,
    # sglang_router_worker); their argument spec is plugins/module_utils/sglang_rollout.py WAIT_ARGS.
    WAIT = r"""
options:
  api_key:
    description: The server's key (C(Authorization)); empty when it has none.
    type: str
    default: ""
  timeout:
    description: Seconds to wait.
    type: float
    default: 120
  interval:
    description: Seconds between two looks.
    type: float
    default: 0.5
"""

    # The options of the modules that talk to the HAProxy front (sglang_frontend_server, sglang_frontend_info);
    # their argument spec is plugins/module_utils/sglang_haproxy.py FRONT_ARGS.
    FRONT = r"""
options:
  socket:
    description: HAProxy's admin socket (roles/sglang_frontend, C(sglang_defaults_frontend.socket)).
    type: path
    default: /run/haproxy/admin.sock
  backend:
    description: The backend that lists the routers (C(sglang_defaults_frontend.backend)).
    type: str
    required: true
"""
