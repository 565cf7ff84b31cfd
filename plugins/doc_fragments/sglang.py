"""What every SGLang module's documentation shares: its authors, and check mode in full, no diff, any POSIX host.
A module adds only what differs (check mode details, its options); with ansible.builtin.action_common_attributes
for the attributes' descriptions."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
author: SGLang DeepSeek-V4 deployment maintainers
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""
