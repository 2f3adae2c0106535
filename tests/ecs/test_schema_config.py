"""Schema declarations (components, archetypes, parameters, env specs) and config loading."""

from dataclasses import dataclass

import numpy as np
import pytest
import torch
import warp as wp

import ecs
from ecs.schema import ENGINE_COLUMNS, ENGINE_SINGLETONS

wp.set_module_options({"enable_backward": False})


def get(sim: ecs.BatchSim, archetype: str, component: str) -> np.ndarray:
    wp.synchronize_device(sim.device)
    return sim.tensor(archetype, component).cpu().numpy().copy()


def test_every_engine_error_is_an_ecs_error():
    for cls in (
        ecs.SchemaError,
        ecs.GraphError,
        ecs.ConfigError,
        ecs.ActionError,
        ecs.CapacityError,
        ecs.StateDictError,
        ecs.OutOfMemoryError,
    ):
        assert issubclass(cls, ecs.EcsError), cls
    assert issubclass(ecs.ConfigError, ValueError)  # callers catching ValueError still work
    assert issubclass(ecs.CapacityError, RuntimeError)


# -- components ------------------------------------------------------------------------------


def test_component_defaults():
    @ecs.component
    class LinearVelocity:
        """Velocity of the centre of mass [m/s]."""

        value: wp.vec3

    assert isinstance(LinearVelocity, ecs.Component)
    assert LinearVelocity.name == "linear_velocity"  # class name in snake_case
    assert LinearVelocity.dtype is wp.vec3
    assert LinearVelocity.shape == ()
    assert not LinearVelocity.singleton
    assert LinearVelocity.doc == "Velocity of the centre of mass [m/s]."
    assert LinearVelocity.export_shape == (3,)
    assert LinearVelocity.itemsize == 12

    @ecs.component(singleton=True, shape=(4, 2), name="board")
    class Cells:
        value: int

    assert (Cells.name, Cells.dtype, Cells.shape, Cells.singleton) == ("board", wp.int32, (4, 2), True)
    assert Cells.export_shape == (4, 2)
    assert Cells.itemsize == 32
    for py, warp_type in ((float, wp.float32), (int, wp.int32), (bool, wp.bool)):
        assert ecs.Component("x", py).dtype is warp_type


def test_component_needs_exactly_one_field_named_value():
    with pytest.raises(ecs.SchemaError, match=r"exactly one field named 'value'.*found none"):

        @ecs.component
        class Empty:
            pass

    with pytest.raises(ecs.SchemaError, match=r"found \['value', 'x'\]"):

        @ecs.component
        class Two:
            value: wp.float32
            x: wp.float32

    with pytest.raises(ecs.SchemaError, match=r"Misnamed must annotate exactly one field named 'value'.*\['val'\]"):

        @ecs.component
        class Misnamed:
            val: wp.float32


@pytest.mark.parametrize("dtype", [str, object, np.float32, "float32", [wp.float32], None, wp.array(dtype=float)])
def test_component_dtype_must_be_a_warp_value_type(dtype):
    with pytest.raises(ecs.SchemaError, match=r"is not a Warp scalar, vector, matrix"):
        ecs.Component("mass", dtype)


@pytest.mark.parametrize(
    "dtype",
    [
        wp.float16,
        wp.float64,
        wp.uint8,
        wp.int64,
        wp.vec2,
        wp.mat44,
        wp.quat,
        wp.transform,
        wp.types.vector(7, wp.int32),
    ],
)
def test_component_accepts_warp_value_types(dtype):
    assert ecs.Component("mass", dtype).dtype is dtype


@pytest.mark.parametrize("name", ["Mass", "mass-1", "1mass", "_mass", "mass__inner", "class", "", "mäss"])
def test_component_names_are_snake_case(name):
    with pytest.raises(ecs.SchemaError, match=r"lower snake_case"):
        ecs.Component(name, wp.float32)


def test_component_shape_rules():
    with pytest.raises(ecs.SchemaError, match=r"shape \(2, 0\) must be >= 1"):
        ecs.Component("grid", wp.float32, (2, 0))
    with pytest.raises(ecs.SchemaError, match=r"more than Warp's 4 array dimensions"):
        ecs.Component("grid", wp.float32, (2, 2, 2))  # (worlds, capacity, 2, 2, 2)
    with pytest.raises(ecs.SchemaError, match=r"more than Warp's 4 array dimensions"):
        ecs.Component("grid", wp.float32, (2, 2, 2, 2), singleton=True)
    assert ecs.Component("grid", wp.float32, (2, 2)).shape == (2, 2)
    assert ecs.Component("grid", wp.float32, [2, 2, 2], singleton=True).shape == (2, 2, 2)


def test_engine_names_are_reserved():
    for name in ENGINE_COLUMNS:
        with pytest.raises(ecs.SchemaError, match=r"engine column; rename"):
            ecs.Archetype("ball", (ecs.Component(name, wp.int32),), capacity=1)
    for name in ENGINE_SINGLETONS:
        spec = ecs.EnvSpec("toy", config=None, singletons=[ecs.Component(name, wp.float32, singleton=True)])
        with pytest.raises(ecs.SchemaError, match=r"engine singleton; rename"):
            spec.validate()


# -- archetypes --------------------------------------------------------------------------------


@ecs.component
class Position:
    """Position along a line [m]."""

    value: wp.float32


@ecs.component
class Velocity:
    """Velocity along a line [m/s]."""

    value: wp.float32


@ecs.component(singleton=True)
class Gravity:
    """Acceleration of the world [m/s^2]."""

    value: wp.float32


def test_archetype_validation():
    ball = ecs.Archetype("ball", [Position, Velocity], capacity=3)
    assert ball.components == (Position, Velocity)  # stored as a tuple
    assert ball.has("position") and ball.has("alive") and ball.has("generation") and not ball.has("mass")
    for capacity in (0, -1, 2.5, True, "3", None):
        with pytest.raises(ecs.SchemaError, match=r"capacity must be an int >= 1"):
            ecs.Archetype("ball", (Position,), capacity=capacity)
    assert ecs.Archetype("ball", (Position,), capacity=np.int64(2)).capacity == 2
    with pytest.raises(ecs.SchemaError, match=r"'position' listed twice"):
        ecs.Archetype("ball", (Position, Velocity, Position), capacity=1)
    with pytest.raises(ecs.SchemaError, match=r"'gravity' is a singleton; list it in the env's singletons"):
        ecs.Archetype("ball", (Position, Gravity), capacity=1)
    with pytest.raises(ecs.SchemaError, match=r"is not a Component"):
        ecs.Archetype("ball", (Position, wp.float32), capacity=1)
    with pytest.raises(ecs.SchemaError, match=r"archetype name 'Ball'"):
        ecs.Archetype("Ball", (Position,), capacity=1)


# -- parameters ----------------------------------------------------------------------------------


def test_param_validation():
    shared = ecs.Param("gain", wp.float32, 2.0)
    assert shared.value.shape == (1,)
    assert ecs.Param("gain", float, [1.0, 2.0, 3.0]).value.shape == (3,)
    assert ecs.Param("offset", wp.vec2, [(1.0, 2.0), (3.0, 4.0)]).value.shape == (2, 2)
    assert ecs.Param("offset", wp.vec2, (1.0, 2.0)).value.shape == (1, 2)  # one vec2, shared
    assert ecs.Param("frame", wp.mat22, [[1.0, 0.0], [0.0, 1.0]]).value.shape == (1, 2, 2)
    with pytest.raises(ecs.SchemaError, match=r"value must be one vec2f or a sequence of them, got shape \(2, 3\)"):
        ecs.Param("offset", wp.vec2, [(1.0, 2.0, 3.0), (4.0, 5.0, 6.0)])
    with pytest.raises(ecs.SchemaError, match=r"value must be one float32 or a sequence of them"):
        ecs.Param("gain", wp.float32, [[1.0, 2.0]])
    with pytest.raises(ecs.SchemaError, match=r"value must be one float32 or a sequence of them"):
        ecs.Param("gain", wp.float32, [])
    with pytest.raises(ecs.SchemaError, match=r"parameter name 'Gain'"):
        ecs.Param("Gain", wp.float32, 1.0)
    with pytest.raises(ecs.SchemaError, match=r"is not a Warp scalar"):
        ecs.Param("gain", str, 1.0)


@ecs.component(singleton=True)
class SeenShared:
    value: wp.float32


@ecs.component(singleton=True)
class SeenPerWorld:
    value: wp.float32


@ecs.component(singleton=True)
class SeenCycled:
    value: wp.int32


@wp.kernel
def copy_params(
    # Resources:
    shared_gain: wp.array(dtype=wp.float32),
    cycled_index: wp.array(dtype=wp.int32),
    # Components out:
    world_seen_shared_out: wp.array(dtype=wp.float32),
    world_seen_cycled_out: wp.array(dtype=wp.int32),
):
    world = wp.tid()
    world_seen_shared_out[world] = ecs.per_world(shared_gain, world)
    world_seen_cycled_out[world] = ecs.per_world(cycled_index, world)


@wp.func
def copy_gain(gain: wp.float32, world_seen_per_world_out: wp.float32):
    return gain


def test_params_shared_and_per_world(device):
    W = 4
    env = ecs.EnvSpec(
        name="schema_params",
        config=None,
        singletons=[SeenShared, SeenPerWorld, SeenCycled],
        systems=[ecs.System(copy_params, ecs.Phase.ACT), ecs.System(copy_gain, ecs.Phase.ACT)],
        params=[
            ecs.Param("shared_gain", wp.float32, 7.5),
            ecs.Param("gain", wp.float32, [1.0, 2.0, 3.0, 4.0]),
            ecs.Param("cycled_index", wp.int32, [10, 20]),
        ],
    )
    sim = ecs.BatchSim(env, W, device=device)
    sim.step()
    np.testing.assert_array_equal(get(sim, "world", "seen_shared"), [7.5] * W)  # one value: shared
    np.testing.assert_array_equal(get(sim, "world", "seen_per_world"), [1.0, 2.0, 3.0, 4.0])  # one per world
    np.testing.assert_array_equal(get(sim, "world", "seen_cycled"), [10, 20, 10, 20])  # world % len
    assert tuple(sim.params["gain"].shape) == (W,)
    assert tuple(sim.params["shared_gain"].shape) == (1,)

    # Parameters are device arrays read at every step: writing them changes the next step.
    sim.params["gain"].copy_(torch.tensor([-1.0, -2.0, -3.0, -4.0]))
    sim.params["shared_gain"].fill_(0.25)
    sim.step()
    np.testing.assert_array_equal(get(sim, "world", "seen_per_world"), [-1.0, -2.0, -3.0, -4.0])
    np.testing.assert_array_equal(get(sim, "world", "seen_shared"), [0.25] * W)


# -- env specs -----------------------------------------------------------------------------------


@ecs.component(singleton=True)
class Push:
    """Action: push direction."""

    value: wp.int32


@ecs.component(singleton=True)
class State:
    """Observation."""

    value: wp.vec4


BALL = ecs.Archetype("ball", (Position, Velocity), capacity=2)


def spec(**kw) -> ecs.EnvSpec:
    base = dict(
        name="toy",
        config=None,
        archetypes=[BALL],
        singletons=[Gravity, Push, State],
        actions={"push": ecs.Action(Push, low=0, high=1)},
        observations={"state": ecs.Observation(State)},
    )
    base.update(kw)
    return ecs.EnvSpec(**base)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (dict(archetypes=[Position]), "archetypes must be ecs.Archetype"),
        (dict(archetypes=[BALL, BALL]), "archetype 'ball' declared twice"),
        (dict(singletons=[Gravity, Position]), "is not a singleton component"),
        (dict(singletons=[Gravity, wp.float32]), "is not a singleton component"),
        (
            dict(singletons=[Gravity, Push, State, ecs.Component("gravity", wp.int32, singleton=True)]),
            "two different singletons named 'gravity'",
        ),
        (dict(singletons=[Gravity, State]), "action 'push' uses singleton 'push', which is missing"),
        (dict(singletons=[Gravity, Push]), "observation 'state' uses singleton 'state', which is missing"),
        (dict(num_agents=0), "num_agents must be None or an int >= 1"),
        (dict(num_agents=2.0), "num_agents must be None or an int >= 1"),
        (dict(max_episode_steps=-1), "max_episode_steps must be an int >= 0"),
        (dict(max_episode_steps=10.0), "max_episode_steps must be an int >= 0"),
        (dict(params=[Position]), "params must be ecs.Param"),
        (
            dict(params=[ecs.Param("gain", float, 1.0), ecs.Param("gain", float, 2.0)]),
            "parameter 'gain' declared twice",
        ),
    ],
)
def test_env_spec_validate_errors(overrides, expected):
    with pytest.raises(ecs.SchemaError, match=expected) as info:
        spec(**overrides).validate()
    assert "env 'toy'" in str(info.value)


def test_env_spec_valid_and_duplicates_of_one_singleton_allowed():
    spec().validate()
    spec(singletons=[Gravity, Push, State, Gravity], num_agents=3, max_episode_steps=5).validate()


def test_component_clashes_found_when_building():
    other_position = ecs.Component("position", wp.vec3)
    box = ecs.Archetype("box", (other_position,), capacity=1)
    with pytest.raises(ecs.SchemaError, match=r"two different components are named 'position'"):
        ecs.BatchSim(spec(archetypes=[BALL, box]), 1, device="cpu")
    clash = ecs.Component("gravity", wp.float32)
    with pytest.raises(ecs.SchemaError, match=r"'gravity' is both an entity component and a singleton"):
        ecs.BatchSim(spec(archetypes=[ecs.Archetype("box", (clash,), capacity=1)]), 1, device="cpu")
    with pytest.raises(ecs.EcsError, match=r"num_worlds must be an int >= 1"):
        ecs.BatchSim(spec(), 0, device="cpu")
    with pytest.raises(ecs.EcsError, match=r"env must be an ecs.EnvSpec"):
        ecs.BatchSim("toy", 1, device="cpu")


def test_action_and_observation_declarations():
    with pytest.raises(ecs.SchemaError, match=r"actions are singleton components"):
        ecs.Action(Position)
    with pytest.raises(ecs.SchemaError, match=r"observations are singleton components"):
        ecs.Observation(Position)
    with pytest.raises(ecs.SchemaError, match=r"discrete action 'push' needs finite low <= high"):
        ecs.Action(Push)
    with pytest.raises(ecs.SchemaError, match=r"discrete action 'push' needs finite low <= high"):
        ecs.Action(Push, low=2, high=1)
    assert ecs.Action(Push, low=0, high=3).discrete
    assert not ecs.Action(Gravity).discrete  # float: a Box, unbounded by default


# -- configs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToyConfig:
    """A toy config with every supported field type."""

    dt: float = 0.1  # s
    steps: int = 10
    render: bool = False
    label: str = "toy"
    size: tuple[float, float] = (1.0, 2.0)  # m
    counts: tuple[int, ...] = (1, 2, 3)
    limit: float | None = None

    def __post_init__(self) -> None:
        if not self.dt > 0:
            raise ValueError(f"dt must be > 0, got {self.dt}")
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")


def test_load_config_defaults_yaml_then_overrides(tmp_path):
    assert ecs.load_config(ToyConfig) == ToyConfig()
    path = tmp_path / "toy.yaml"
    path.write_text("dt: 0.5\nsteps: 20\nlabel: yaml\nsize: [3, 4.5]\ncounts: [7]\nlimit: 2\n")
    cfg = ecs.load_config(ToyConfig, path)
    assert cfg == ToyConfig(dt=0.5, steps=20, label="yaml", size=(3.0, 4.5), counts=(7,), limit=2.0)
    assert isinstance(cfg.size, tuple) and isinstance(cfg.size[0], float)  # YAML lists become typed tuples
    assert isinstance(cfg.limit, float)
    cfg = ecs.load_config(ToyConfig, str(path), steps=3, render=True, limit=None)
    assert (cfg.dt, cfg.steps, cfg.render, cfg.limit) == (0.5, 3, True, None)  # overrides win over the file
    assert isinstance(ecs.load_config(ToyConfig, dt=1).dt, float)  # an int is a fine float
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    assert ecs.load_config(ToyConfig, empty) == ToyConfig()


def test_load_config_unknown_keys_listed(tmp_path):
    with pytest.raises(ecs.ConfigError) as info:
        ecs.load_config(ToyConfig, dtt=0.2, stepz=3)
    msg = str(info.value)
    assert "['dtt', 'stepz']" in msg
    assert "['counts', 'dt', 'label', 'limit', 'render', 'size', 'steps']" in msg
    path = tmp_path / "toy.yaml"
    path.write_text("gravity: 9.8\n")
    with pytest.raises(ecs.ConfigError, match=r"unknown config key\(s\) \['gravity'\] for ToyConfig"):
        ecs.load_config(ToyConfig, path)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (dict(dt="fast"), "ToyConfig.dt must be a number, got 'fast'"),
        (dict(dt=True), "ToyConfig.dt must be a number, got True"),
        (dict(steps=2.5), "ToyConfig.steps must be an int, got 2.5"),
        (dict(steps=True), "ToyConfig.steps must be an int, got True (bool)"),
        (dict(steps="3"), "ToyConfig.steps must be an int, got '3'"),
        (dict(render=1), "ToyConfig.render must be true or false, got 1 (int)"),
        (dict(render="yes"), "ToyConfig.render must be true or false"),
        (dict(label=3), "ToyConfig.label must be a string, got 3"),
        (dict(size=1.0), "ToyConfig.size must be a list, got 1.0"),
        (dict(size=[1.0]), "ToyConfig.size must have 2 entries, got 1"),
        (dict(size=[1.0, "a"]), "ToyConfig.size[1] must be a number, got 'a'"),
        (dict(counts=[1, 2.5]), "ToyConfig.counts[1] must be an int, got 2.5"),
        (dict(limit="high"), "ToyConfig.limit must be a number, got 'high'"),
    ],
)
def test_load_config_wrong_types_named(overrides, expected):
    with pytest.raises(ecs.ConfigError) as info:
        ecs.load_config(ToyConfig, **overrides)
    assert expected in str(info.value)


def test_load_config_bool_and_int_are_strict_in_yaml(tmp_path):
    path = tmp_path / "toy.yaml"
    path.write_text("steps: yes\n")  # YAML 1.1: a bool
    with pytest.raises(ecs.ConfigError, match=r"ToyConfig.steps must be an int, got True"):
        ecs.load_config(ToyConfig, path)
    path.write_text("render: 1\n")
    with pytest.raises(ecs.ConfigError, match=r"ToyConfig.render must be true or false, got 1"):
        ecs.load_config(ToyConfig, path)
    path.write_text("render: true\nsteps: 4\n")
    assert ecs.load_config(ToyConfig, path) == ToyConfig(render=True, steps=4)


def test_load_config_range_errors_become_config_errors():
    with pytest.raises(ecs.ConfigError, match=r"ToyConfig: dt must be > 0, got -0.5") as info:
        ecs.load_config(ToyConfig, dt=-0.5)
    assert isinstance(info.value, ecs.EcsError)
    with pytest.raises(ecs.ConfigError, match=r"steps must be >= 1, got 0"):
        ecs.load_config(ToyConfig, steps=0)


def test_load_config_bad_files(tmp_path):
    with pytest.raises(ecs.ConfigError, match=r"does not exist"):
        ecs.load_config(ToyConfig, tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("dt: [1, 2\n")
    with pytest.raises(ecs.ConfigError, match=r"is not valid YAML"):
        ecs.load_config(ToyConfig, bad)
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ecs.ConfigError, match=r"must hold a mapping of field: value, got list"):
        ecs.load_config(ToyConfig, bad)
    with pytest.raises(ecs.ConfigError, match=r"is not a dataclass"):
        ecs.load_config(dict, dt=1.0)


def test_env_registry_validates_overrides():
    import envs

    with pytest.raises(ecs.ConfigError, match=r"unknown environment 'cartpol'"):
        envs.make("cartpol")
    with pytest.raises(ecs.ConfigError) as info:
        envs.make("cartpole", gravityy=1.0)
    assert "['gravityy']" in str(info.value) and "'gravity'" in str(info.value)
    with pytest.raises(ecs.ConfigError, match=r"tau must be > 0"):
        envs.make("cartpole", tau=0.0)
    assert envs.make("cartpole", tau=0.01).config.tau == 0.01


def test_config_overrides_from_the_command_line():
    """``envs.parse_overrides``: ``KEY=VALUE`` strings (``--set``) to typed overrides for ``envs.make``."""
    import envs

    got = envs.parse_overrides(["tau=0.01", " force_mag = 12", "name=left", "flag=true", "empty=", "x=a=b"])
    assert got == {"tau": 0.01, "force_mag": 12, "name": "left", "flag": True, "empty": None, "x": "a=b"}
    assert envs.make("cartpole", **envs.parse_overrides(["tau=0.02"])).config.tau == 0.02
    assert envs.parse_overrides([]) == {}
    for bad in ("tau", "=1", " =1"):
        with pytest.raises(ecs.ConfigError, match=r"a config override is KEY=VALUE \(for example"):
            envs.parse_overrides([bad])
