#!/usr/bin/python
"""Ansible module: take an engine out of the smg router (drained) or put it back (gated on the router's view)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_router_worker
short_description: Take an engine out of the smg 1.13.0 router, draining it, or put it back into it
description:
  - "O(state=absent): C(DELETE /workers/{id}) on the router: smg marks the worker C(draining) (no new request is
    routed to it, the ones it runs finish) and drops it after its drain settle window; the module waits until it is
    gone from C(GET /workers). RV(spec) is what O(state=present) needs to register it again."
  - "O(state=present): C(POST /workers) with O(spec) unless the router lists the worker, then wait until the router
    reports it C(ready) and healthy. With O(workers), the same for each worker of the list, in one call."
  - "A router that does not answer at all (stopped) routes nothing: O(state=absent) then warns and returns
    RV(spec) null; O(state=present) fails, or with O(router_down=skip) changes nothing (a router that starts
    later lists its declared workers from its own flags)."
  - Runs on the router's host (the router may listen on loopback only). With the router's C(--api-key), the worker
    API needs it (O(api_key)); a worker registered again gets it too, as the router's own workers have it.
version_added: "1.1.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sglang.dsv4.sglang
  - sglang.dsv4.sglang.wait
attributes:
  check_mode:
    details: Reports whether the worker is listed and would be removed or added; changes nothing.
options:
  router:
    description: Base URL of the router, for example V(http://127.0.0.1:8000).
    type: str
    required: true
  url:
    description:
      - The worker's URL as the router knows it (its C(--prefill) or C(--decode) URL).
      - Required with O(state=absent); with O(state=present), O(spec) or O(workers) names the workers.
    type: str
  state:
    description: V(absent) takes the worker out (drained), V(present) puts it back.
    type: str
    choices: [absent, present]
    required: true
  spec:
    description:
      - "O(state=present): the worker to register: C(url), C(worker_type) (V(prefill) or V(decode)) and, for a
        prefill, C(bootstrap_port). Usually RV(spec) of the O(state=absent) call."
    type: dict
  workers:
    description:
      - "O(state=present): several workers to put back, each as in O(spec) (for example every declared worker of
        the router)."
    type: list
    elements: dict
    version_added: "1.3.0"
  router_down:
    description: What O(state=present) does when the router does not answer at all.
    type: str
    choices: [fail, skip]
    default: fail
"""

EXAMPLES = r"""
- name: Take the decode engine out of the router
  sglang.dsv4.sglang_router_worker:
    router: http://127.0.0.1:8000
    url: http://decode-01:30001
    state: absent
  register: out

- name: Put it back
  sglang.dsv4.sglang_router_worker:
    router: http://127.0.0.1:8000
    url: http://decode-01:30001
    state: present
    spec: "{{ out.spec }}"

- name: Put back every declared worker the router lacks
  sglang.dsv4.sglang_router_worker:
    router: http://127.0.0.1:8000
    state: present
    workers:
      - {url: "http://prefill-01:30000", worker_type: prefill, bootstrap_port: 8998}
      - {url: "http://decode-01:30001", worker_type: decode}
"""

RETURN = r"""
spec:
  description: The worker as it was registered (O(state=absent)); null when the router did not list it.
  returned: always
  type: dict
seconds:
  description: How long the router took to drop the worker, or to report it ready and healthy (all of O(workers)).
  returned: always
  type: float
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_rollout import (
    WAIT_ARGS,
    RolloutError,
    listed_workers,
    put_back,
    serving,
    take_out,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "router": {"type": "str", "required": True},
            "url": {"type": "str"},
            "state": {"type": "str", "required": True, "choices": ["absent", "present"]},
            "spec": {"type": "dict"},
            "workers": {"type": "list", "elements": "dict"},
            "router_down": {"type": "str", "default": "fail", "choices": ["fail", "skip"]},
            **WAIT_ARGS,
        },
        required_if=[("state", "absent", ["url"]), ("state", "present", ["spec", "workers"], True)],
        mutually_exclusive=[("spec", "workers")],
        supports_check_mode=True,
    )
    p = module.params
    specs = p["workers"] if p["workers"] is not None else [p["spec"]] if p["spec"] else []
    urls = [p["url"]] if p["state"] == "absent" else [str(s["url"]) for s in specs]
    try:
        try:
            listed = listed_workers(p["router"], urls, p["api_key"])
        except OSError as e:
            # No router answering routes nothing to the engine: there is nothing to take it out of, and a router
            # that starts later lists its declared workers from its own flags.
            if p["state"] == "present" and p["router_down"] == "fail":
                raise
            module.warn(f"{p['router']} does not answer ({e}); worker(s) {', '.join(urls)} left as they are")
            module.exit_json(changed=False, spec=None, seconds=0.0)
        if module.check_mode:
            if p["state"] == "absent":
                change = listed[p["url"]] is not None
            else:
                change = not all(serving(w) for w in listed.values())
            module.exit_json(changed=change, spec=None, seconds=0.0)
        if p["state"] == "absent":
            result = take_out(p["router"], p["url"], p["api_key"], p["timeout"], p["interval"])
        else:
            # A worker the first listing shows serving needs nothing; the others are registered and waited for.
            results = []
            for s in specs:
                found = listed[str(s["url"])]
                if found is not None and serving(found):
                    results.append({"changed": False, "seconds": 0.0, "worker_id": found["id"]})
                else:
                    results.append(put_back(p["router"], s, p["api_key"], p["timeout"], p["interval"]))
            result = {
                "changed": any(r["changed"] for r in results),
                "seconds": round(sum(r["seconds"] for r in results), 3),
                **({"worker_id": results[0]["worker_id"]} if p["workers"] is None else {}),
            }
    except (RolloutError, OSError) as e:
        module.fail_json(msg=f"{p['router']}: worker(s) {', '.join(urls)} state={p['state']}: {e}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
