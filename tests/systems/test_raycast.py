"""Ray casting against a brute-force numpy ray marcher on random scenes; lidar, visibility, reach and locking.

The reference marches every ray in 2 mm steps through point-in-solid tests written independently
of the kernels (no shared geometry code), then bisects the first step that enters a solid. It
agrees with the analytic casts to the bisection's precision except on grazing rays, whose chord
through a solid is shorter than a step; those are counted and must be rare.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import warp as wp

import ecs
from systems import locking, raycast
from systems.geometry import ShapeType, wedge_vertices_np
from systems.physics import BodySpec, PhysicsConfig
from systems.rigid_body import Response

from . import scene

S = ShapeType


def rotate_inv(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotates ``v`` (..., 3) by the inverse of unit quaternion ``q`` (x, y, z, w)."""
    u, w = -q[:3], q[3]
    return 2 * (u @ v.T)[:, None] * u + (w * w - u @ u) * v + 2 * w * np.cross(u, v) if v.ndim == 2 else None


def inside(body: BodySpec, p: np.ndarray) -> np.ndarray:
    """Whether each point of ``p`` (n, 3) lies in the body's solid."""
    q = np.asarray(body.rotation, float)
    q = q / np.linalg.norm(q)
    local = rotate_inv(q, p - np.asarray(body.position, float))
    size = np.asarray(body.size, float)
    if body.shape == S.SPHERE:
        return np.linalg.norm(local, axis=1) <= size[0]
    if body.shape == S.CAPSULE:
        z = np.clip(local[:, 2], -size[1], size[1])
        return np.linalg.norm(local - np.stack([0 * z, 0 * z, z], 1), axis=1) <= size[0]
    if body.shape == S.BOX:
        return np.all(np.abs(local) <= size, axis=1)
    if body.shape == S.WEDGE:
        tri = wedge_vertices_np(size)[:3][:, [0, 2]]
        ok = np.abs(local[:, 1]) <= size[1]
        for i in range(3):  # counter-clockwise triangle: inside is left of every edge
            a, b = tri[i], tri[(i + 1) % 3]
            ok &= (b[0] - a[0]) * (local[:, 2] - a[1]) - (b[1] - a[1]) * (local[:, 0] - a[0]) >= 0
        return ok
    return local[:, 2] <= 0.0  # plane


def reference_cast(bodies, o, d, max_t, step=2e-3):
    """(distance, body index) of the first solid along the ray, by marching and bisection."""
    ts = np.arange(0.0, max_t + step, step)
    pts = o + ts[:, None] * d
    first, who = len(ts), -1
    for i, b in enumerate(bodies):
        hit = np.flatnonzero(inside(b, pts))
        if hit.size and hit[0] < first:
            first, who = hit[0], i
    if who < 0:
        return max_t, -1
    if first == 0:
        return 0.0, who
    lo, hi = ts[first - 1], ts[first]
    for _ in range(30):
        mid = (lo + hi) / 2
        if inside(bodies[who], (o + mid * d)[None])[0]:
            hi = mid
        else:
            lo = mid
    return (hi if hi <= max_t else max_t), who


@wp.kernel
def cast_rays(
    alive: wp.array2d[wp.int32],
    shape: wp.array2d[wp.int32],
    size: wp.array2d[wp.vec3],
    position: wp.array2d[wp.vec3],
    rotation: wp.array2d[wp.quat],
    origins: wp.array2d[wp.vec3],
    directions: wp.array2d[wp.vec3],
    max_t: float,
    t_out: wp.array2d[wp.float32],
    hit_out: wp.array2d[wp.int32],
):
    world, k = wp.tid()
    t, hit = raycast.cast_ray(
        alive, shape, size, position, rotation, world, origins[world, k], directions[world, k], max_t, -1
    )
    t_out[world, k] = t
    hit_out[world, k] = hit


def random_quat(rng) -> tuple[float, ...]:
    q = rng.normal(size=4)
    return tuple(q / np.linalg.norm(q))


def random_scene(rng) -> list[BodySpec]:
    bodies = [
        BodySpec(
            S.PLANE,
            position=(0, 0, -1.5),
            rotation=random_quat(rng) if rng.random() < 0.3 else (0, 0, 0, 1),
            response=Response.STATIC,
        )
    ]
    for kind in [S.SPHERE, S.CAPSULE, S.BOX, S.WEDGE] * 3:
        size = tuple(rng.uniform(0.1, 0.6, size=3))
        bodies.append(
            BodySpec(int(kind), size=size, position=tuple(rng.uniform(-2.5, 2.5, size=3)), rotation=random_quat(rng))
        )
    return bodies


def test_cast_ray_matches_a_brute_force_marcher_on_random_scenes():
    rng = np.random.default_rng(7)
    num_worlds, num_rays, max_t = 3, 150, 6.0
    scenes = [random_scene(rng) for _ in range(num_worlds)]
    sim = scene.build(lambda w: scenes[w], PhysicsConfig(max_bodies=16), num_worlds=num_worlds)
    origins = rng.uniform(-3, 3, size=(num_worlds, num_rays, 3)).astype(np.float32)
    dirs = rng.normal(size=(num_worlds, num_rays, 3))
    dirs = (dirs / np.linalg.norm(dirs, axis=-1, keepdims=True)).astype(np.float32)
    t_out = wp.zeros((num_worlds, num_rays), dtype=wp.float32)
    hit_out = wp.zeros((num_worlds, num_rays), dtype=wp.int32)
    tab = sim.tables["body"]
    wp.launch(
        cast_rays,
        dim=(num_worlds, num_rays),
        inputs=[
            tab["alive"],
            tab["shape"],
            tab["size"],
            tab["position"],
            tab["rotation"],
            wp.array(origins, dtype=wp.vec3),
            wp.array(dirs, dtype=wp.vec3),
            max_t,
            t_out,
            hit_out,
        ],
    )
    t, hit = t_out.numpy(), hit_out.numpy()
    grazing, hits, kinds = 0, 0, set()
    for w in range(num_worlds):
        for k in range(num_rays):
            ref_t, ref_hit = reference_cast(scenes[w], origins[w, k].astype(float), dirs[w, k].astype(float), max_t)
            if ref_hit == hit[w, k]:
                # Same body: distances agree to float32 precision of the kernels (1e-4 m at 6 m) and
                # the reference's bisection (far below that).
                assert t[w, k] == pytest.approx(ref_t, abs=2e-4), (w, k)
                if ref_hit >= 0:
                    hits += 1
                    kinds.add(int(scenes[w][ref_hit].shape))
                continue
            # A disagreement must be a grazing ray: the reference stepped over a chord shorter than
            # its 2 mm step, so the kernel's body is hit at (nearly) the same or a shorter distance.
            grazing += 1
            assert hit[w, k] >= 0 and t[w, k] <= ref_t + 2e-4, (w, k, t[w, k], hit[w, k], ref_t, ref_hit)
    assert grazing <= 0.02 * num_worlds * num_rays
    assert hits > num_worlds * num_rays // 3, "the scenes must be dense enough that most rays hit"
    assert kinds == {int(s) for s in (S.SPHERE, S.CAPSULE, S.BOX, S.WEDGE, S.PLANE)}, "every shape must be hit"


# -- sensors and locking through an env ---------------------------------------------------------------

NUM_RAYS = 16
CFG = PhysicsConfig(max_bodies=8, gravity=0.0)


def sensor_env(wide: bool = False) -> ecs.EnvSpec:
    agent = ecs.Archetype(
        "agent",
        (
            raycast.BodyRow,
            *raycast.lidar_components(NUM_RAYS),
            raycast.visible_component(CFG.max_bodies),
            raycast.reach_gap_component(CFG.max_bodies),
            raycast.ReachTarget,
            locking.Team,
            locking.LockRequest,
        ),
        capacity=2,
    )
    return scene.make_env(
        CFG,
        name="sensor_test",
        archetypes=[agent],
        extra_systems=[
            ecs.System(locking.lock_bodies, ecs.Phase.ACT, dim="world"),
            *raycast.sensor_systems(wide=wide, phase=ecs.Phase.REWARD)[2:],  # reach
            *raycast.sensor_systems(wide=wide)[:2],  # lidar, visibility
        ],
        resources=raycast.default_resources(lidar_range=5.0, reach_distance=0.3),
    )


def sensor_sim(wide: bool = False) -> ecs.BatchSim:
    bodies = [
        BodySpec(S.SPHERE, size=(0.15, 0, 0), position=(0, 0, 0)),  # 0: agent A, facing +x
        BodySpec(S.SPHERE, size=(0.15, 0, 0), position=(3, 2, 0), rotation=(0, 0, 1, 0)),  # 1: agent B, facing -x
        BodySpec(S.BOX, size=(0.2, 0.2, 0.2), position=(0.6, 0, 0)),  # 2: box right in front of A, within reach
        BodySpec(S.BOX, size=(0.3, 0.3, 0.3), position=(2.0, 0, 0)),  # 3: behind box 2 (occluded from A)
        BodySpec(S.WEDGE, size=(0.3, 0.3, 0.3), position=(-2.0, 0, 0)),  # 4: behind A (outside its cone)
        BodySpec(
            S.BOX,
            size=(0.1, 3.0, 1.0),
            position=(0, -3.0, 0),
            rotation=(0, 0, 0.7071, 0.7071),
            response=Response.STATIC,
        ),  # 5: a wall
    ]
    sim = ecs.BatchSim(sensor_env(wide), 2, device="cpu")
    from systems import physics

    physics.load_scene(sim, bodies)
    sim.tensor("agent", "alive")[:] = 1
    sim.tensor("agent", "body_row")[:] = sim.tensor("agent", "body_row").new_tensor([0, 1])
    sim.tensor("agent", "team")[:] = sim.tensor("agent", "team").new_tensor([0, 1])
    return sim


@pytest.mark.parametrize("wide", [False, True], ids=["thread-per-agent", "thread-per-ray"])
def test_lidar_visibility_and_reach(wide):
    sim = sensor_sim(wide)
    sim.step()
    bodies_pos = scene.column(sim, "position")
    lidar = scene.column(sim, "lidar", "agent")
    hits = scene.column(sim, "lidar_hit", "agent")
    # Agent A's ray 0 points along +x: the near face of box 2 at 0.4 m; ray 8 along -x: the wedge's
    # back face at -2 + 2 * 0.3 / 3 = -1.8 m; ray 12 along -y: the wall's face at y = -2.9.
    assert lidar[0, 0, 0] == pytest.approx(0.4, abs=1e-5) and hits[0, 0, 0] == 2
    assert lidar[0, 0, 8] == pytest.approx(1.8, abs=1e-5) and hits[0, 0, 8] == 4
    assert lidar[0, 0, 12] == pytest.approx(2.9, abs=1e-5) and hits[0, 0, 12] == 5
    # Ray 4 along +y meets nothing within 5 m: the range, hit -1.
    assert lidar[0, 0, 4] == pytest.approx(5.0) and hits[0, 0, 4] == -1
    # Every lidar ray agrees with the brute-force marcher (agent B's frame is turned by 180 degrees).
    specs = [
        BodySpec(int(s), size=tuple(z), position=tuple(p), rotation=tuple(q))
        for s, z, p, q in zip(
            scene.column(sim, "shape")[0, :6],
            scene.column(sim, "size")[0, :6],
            bodies_pos[0, :6],
            scene.column(sim, "rotation")[0, :6],
            strict=True,
        )
    ]
    grazing = 0
    for agent, sign in ((0, 1.0), (1, -1.0)):
        others = [b for i, b in enumerate(specs) if i != agent]
        index = [i for i in range(6) if i != agent]
        for k in range(NUM_RAYS):
            a = 2 * math.pi * k / NUM_RAYS
            d = np.array([sign * math.cos(a), sign * math.sin(a), 0.0])
            ref_t, ref_hit = reference_cast(others, bodies_pos[0, agent].astype(float), d, 5.0)
            if hits[0, agent, k] == (index[ref_hit] if ref_hit >= 0 else -1):
                assert lidar[0, agent, k] == pytest.approx(ref_t, abs=3e-4), (agent, k)
            else:  # B's 45 degree ray grazes box 2's corner exactly, which the marcher steps over
                grazing += 1
                assert hits[0, agent, k] >= 0 and lidar[0, agent, k] <= ref_t, (agent, k)
    assert grazing <= 1
    visible = scene.column(sim, "visible", "agent")
    # A sees box 2 and agent B (inside its 67.5 degree half-cone), not box 3 (occluded by box 2),
    # not the wedge behind it, and never itself.
    assert visible[0, 0].tolist() == [0, 1, 1, 0, 0, 0, 0, 0]
    # B (at (3, 2), facing -x) looks down on the row from the side: A, boxes 2 and 3 and the wedge
    # are all in its cone and unoccluded; the centre of the wall is hidden behind box 3.
    assert visible[0, 1, [0, 2, 3, 4, 5]].tolist() == [1, 1, 1, 1, 0]
    reach = scene.column(sim, "reach_target", "agent")
    assert reach[:, 0].tolist() == [2, 2]  # box 2's face is 0.25 m from A's surface, within 0.3 m
    assert reach[:, 1].tolist() == [-1, -1]


def test_a_locked_body_acts_static_and_only_its_team_unlocks_it():
    sim = sensor_sim()
    sim.step()  # reach targets: A -> box 2
    force = sim.tensor("body", "force")
    request = sim.tensor("agent", "lock_request")
    request[0, 0] = 1  # world 0: team 0 locks box 2
    sim.step()
    request[:] = 0
    locked = scene.column(sim, "locked_by")
    assert locked[0, 2] == 1 and locked[1, 2] == 0
    force[:, 2, 0] = 50.0  # push box 2 in both worlds
    for _ in range(5):
        sim.step()
    x = scene.column(sim, "position")[:, 2, 0]
    assert x[0] == pytest.approx(0.6, abs=1e-6), "a locked body must not move"
    assert x[1] > 0.7, "the unlocked twin moves"
    # Team 1 cannot unlock it (B's reach target is not box 2 anyway: point B at it).
    sim.tensor("agent", "reach_target")[0, 1] = 2
    request[0, 1] = -1
    locking_only = scene.column(sim, "locked_by")[0, 2]
    sim.step()
    assert scene.column(sim, "locked_by")[0, 2] == locking_only == 1
    request[0, 1] = 0
    request[0, 0] = -1  # team 0 unlocks
    sim.step()
    request[:] = 0
    assert scene.column(sim, "locked_by")[0, 2] == 0
    for _ in range(3):
        sim.step()
    assert scene.column(sim, "position")[0, 2, 0] > 0.6 + 1e-3, "once unlocked it moves again"


def test_wide_sensors_equal_the_per_agent_ones_bit_for_bit():
    """Hide-and-seek with lidar per ray, visibility and reach per target against a thread per agent: 24
    procedural worlds, random actions, resets included; every array of the state but the wide reach sensor's
    scratch is identical."""
    import torch

    import envs

    states = []
    for wide in (True, False):
        env = envs.make("hide_and_seek", wide_sensors=wide, max_episode_steps=25)
        sim = ecs.BatchSim(env, 24, device="cpu", seed=7)
        gen = torch.Generator().manual_seed(1)
        for _ in range(40):
            for key, high in (("move", 11), ("grab", 2), ("lock", 2)):
                shape = tuple(sim.actions[key].shape)
                sim.actions[key].copy_(torch.randint(0, high, shape, generator=gen, dtype=torch.int32))
            sim.step()
        states.append(sim.state_dict()["arrays"])
        names = [t.name for t in sim.graph.tasks]
        assert ("cast_lidar_rays" in names) == wide and ("cast_lidar" in names) != wide
        assert ("measure_reach" in names) == wide and ("find_reach_targets" in names) != wide
    assert states[0].keys() == states[1].keys()
    for key in states[0]:
        if key != "table/agent/reach_gap":
            np.testing.assert_array_equal(states[0][key], states[1][key], err_msg=key)
    assert (states[0]["table/agent/lidar"] > 0).any()
    assert (states[0]["table/agent/reach_target"] >= 0).any()  # agents had things in reach


def test_wide_sensors_refuse_two_archetypes_with_the_columns():
    lidar = (raycast.BodyRow, *raycast.lidar_components(NUM_RAYS))
    env = scene.make_env(
        CFG,
        name="two_lidars",
        archetypes=[ecs.Archetype("rover", lidar, capacity=2), ecs.Archetype("drone", lidar, capacity=1)],
        extra_systems=raycast.sensor_systems(wide=True)[:1],
        resources=raycast.default_resources(),
    )
    with pytest.raises(ecs.GraphError, match="exactly one archetype with 'lidar'"):
        ecs.BatchSim(env, 1, device="cpu")
