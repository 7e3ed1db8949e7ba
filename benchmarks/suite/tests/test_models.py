"""The suite's workloads serve signals a trained model would: outputs of a sane scale."""

import pytest
import torch

from benchmarks.suite.models import build


@pytest.mark.parametrize("key", ["mobilenet_v2", "efficientnet_b0", "resnet50"])
def test_torchvision_outputs_keep_a_trained_scale(key):
    """Without estimated BatchNorm statistics mobilenet_v2's logits are ~1e-9 and
    efficientnet_b0's ~1e-14, where int8 activation scales underflow to zero."""
    pytest.importorskip("torchvision")
    model, cases = build(key)
    ((_, args, kwargs, _),) = cases
    with torch.no_grad():
        out = model(*args, **kwargs)
    assert not model.training
    assert 1e-2 < out.std().item() < 1e2


def test_a_workload_is_the_same_in_every_process():
    """Every tool and the oracle build their own copy: weights and inputs must agree."""
    pytest.importorskip("torchvision")
    (model_a, cases_a), (model_b, cases_b) = build("mobilenet_v2"), build("mobilenet_v2")
    for (name, a), (_, b) in zip(
        model_a.state_dict().items(), model_b.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    assert torch.equal(cases_a[0][1][0], cases_b[0][1][0])


def test_the_targets_count_every_workload():
    from benchmarks.suite.models import WORKLOADS
    from benchmarks.suite.results import SUITE_WORKLOADS

    assert len(WORKLOADS) == SUITE_WORKLOADS


def test_the_lstm_tagger_tags_every_step_and_reads_as_a_recurrent_mix():
    import types

    from dlopt.pipeline.ground_truth import operator_mix

    model, ((_, (frames,), _, _),) = build("lstm_tagger")
    with torch.no_grad():
        tags = model(frames)
    assert tags.shape == (4, 32, 32)
    case = types.SimpleNamespace(args=(frames,), kwargs={})
    reference = types.SimpleNamespace(cases=[case], calling_context=torch.no_grad)
    mix = operator_mix(model, reference)
    assert mix.kind == "recurrent", mix.describe()
    assert mix.recurrent > 0.5
