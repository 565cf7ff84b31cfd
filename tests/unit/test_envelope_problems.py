"""envelope_problems: the problem list roles/sglang_validate fails with, assembled from its checks in their order."""

from __future__ import annotations

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_validate import envelope_problems

TYPE = "gpu-node-01: sglang_gpu_memory_gib='lots': argument 'sglang_gpu_memory_gib' ...; fix: declare a float"
FLEET = "gpu-node-01: sglang_decode.port=30000: port already used by sglang_prefill.port [fleet.ports_free]; fix: ..."
DEEP = "gpu-node-01: sglang_decode: SGLang 0.5.23 refuses ...; fix: ..."


def test_a_valid_envelope_has_no_problem() -> None:
    assert envelope_problems([], ["deepseek-v4-flash"], True, "/repo/models", [], []) == []


def test_the_checks_come_in_their_order() -> None:
    assert envelope_problems([], ["m"], True, "/repo/models", [FLEET], [DEEP]) == [FLEET, DEEP]


def test_type_errors_stop_the_model_judgement() -> None:
    assert envelope_problems([TYPE], [], False, "/repo/models", [], []) == [TYPE]
    assert envelope_problems([TYPE], ["a", "b"], False, "/repo/models", [], []) == [TYPE]


def test_one_fleet_serves_one_model() -> None:
    assert envelope_problems([], ["a", "b"], False, "/repo/models", [], []) == [
        "sglang_model.name=a,b: the engine hosts declare 2 models, one fleet serves one; "
        "fix: declare one sglang_model for every engine host"
    ]
    assert envelope_problems([], [], False, "/repo/models", [], []) == [
        "sglang_model.name=: the engine hosts declare 0 models, one fleet serves one; "
        "fix: declare one sglang_model for every engine host"
    ]


def test_the_model_config_must_be_on_the_controller() -> None:
    assert envelope_problems([], ["deepseek-v4-flash"], False, "/repo/models", [], []) == [
        "sglang_model.name=deepseek-v4-flash: no model config at /repo/models/deepseek-v4-flash/config.json; "
        "fix: add the model config.json there or set sglang_validate_model_config"
    ]
