import numpy as np
import pytest

from tests.conftest import make_cluster
from wattsched.core.cluster import ClusterState


@pytest.fixture
def spec():
    return make_cluster([(2, "T4", 8000, 1000), (4, "V100", 16000, 2000), (0, "", 4000, 500)])


def test_initial_state_marks_absent_gpu_slots(spec):
    state = ClusterState(spec)
    assert state.gpu_left.shape == (3, 4)
    assert state.gpu_left[0].tolist() == [1000, 1000, -1, -1]
    assert state.gpu_left[2].tolist() == [-1, -1, -1, -1]
    assert state.free_gpus.tolist() == [2, 4, 0]
    assert state.gpu_left_total.tolist() == [2000, 4000, 0]
    assert state.allocated_milli == 0


def test_allocate_release_round_trip(spec):
    state = ClusterState(spec)
    state.allocate(1, (0,), 300, 1000, 100)
    state.allocate(1, (2, 3), 1000, 2000, 200)
    assert state.gpu_left[1].tolist() == [700, 1000, 0, 0]
    assert state.free_gpus[1] == 1
    assert state.max_gpu_left[1] == 1000
    assert state.allocated_milli == 2300
    assert state.nodes_busy == 1
    assert state.gpu_pod_kinds[1].tolist() == [1, 0, 1, 0, 0]
    state.check_invariants()
    state.release(1, (2, 3), 1000, 2000, 200)
    state.release(1, (0,), 300, 1000, 100)
    assert state.gpu_left[1].tolist() == [1000] * 4
    assert state.cpu_left[1] == 16000 and state.nodes_busy == 0 and state.allocated_milli == 0
    state.check_invariants()


def test_over_allocation_raises(spec):
    state = ClusterState(spec)
    state.allocate(0, (0,), 800, 0, 0)
    with pytest.raises(RuntimeError):
        state.allocate(0, (0,), 300, 0, 0)
    with pytest.raises(RuntimeError):
        state.allocate(2, (), 0, 5000, 0)
    assert state.gpu_left[0, 0] == 200  # the failed call changed nothing


def test_release_epoch_and_availability(spec):
    state = ClusterState(spec)
    epoch = state.release_epoch
    state.set_available(np.array([0]), False)
    assert not state.available[0] and state.release_epoch == epoch
    state.set_available(np.array([0]), True)
    assert state.release_epoch == epoch + 1
