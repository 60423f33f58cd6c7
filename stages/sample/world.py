"""The sample's world: places, scenery, object instances, face photographs, and the routes.

Everything is made of primitives the renderer intersects exactly: axis-aligned boxes, vertical
cylinders, vertical cones, spheres and vertical one-sided quads (posters, the face photograph), on
an infinite floor at z = 0. World frame: metres, x east, y north, z up (stages/geometry.py).

Layout (x east, y north), a ring the route walks round:

    y=52  +------------------ hall (indoor) ------------------+
          |   [face photo on the north wall]                   |
    y=40  +--door--+---------------------+----open----+--------+
          | street |   building block    |  corridor  |
          | (open) |                     |  (indoor)  |
    y=20  +--------+---------------------+------------+--------+
          |                   plaza (open)                     |
    y=0   +----------------------------------------------------+
         x=0  x=2 x=10                  x=19         x=27     x=28
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from vsi_wild.stages.sample import textures as tx
from vsi_wild.stages.sample.route import RAMP_S, Arc, Goto, Leg, Move, Pause, Route, Turn

BOX, CYL, CONE, SPHERE, QUAD = 0, 1, 2, 3, 4
SHAPES = {BOX: "box", CYL: "cylinder", CONE: "cone", SPHERE: "sphere", QUAD: "quad"}
# Box faces in material order: -x, +x, -y, +y, -z, +z. Round shapes use slot 0 (side) and 5 (top).
NX, PX, NY, PY, NZ, PZ = range(6)
# Instance-id buffer labels: object instances use their instance_id (>= 0); the face region of a
# face photograph is FACE_LABEL + face_id; everything else is NO_LABEL.
NO_LABEL = -1
FACE_LABEL = 1 << 20


@dataclass(frozen=True)
class Place:
    name: str
    x_min: float
    y_min: float
    x_max: float
    y_max: float
    indoor: bool

    def contains(self, x: float, y: float) -> bool:
        return self.x_min <= x <= self.x_max and self.y_min <= y <= self.y_max


PLACES = (
    Place("plaza", 0.0, 0.0, 28.0, 20.0, False),
    Place("street", 2.0, 20.0, 10.0, 40.0, False),
    Place("hall", 0.0, 40.0, 28.0, 52.0, True),
    Place("corridor", 19.0, 20.0, 27.0, 40.0, True),
)


@dataclass(frozen=True)
class Category:
    name: str
    shape: int
    size: tuple[float, float, float]  # bounding box (x, y, z), metres
    colour: tuple[int, int, int]  # the category's dominant colour (tests look for it)
    texture: str


# Distinct saturated hues; the scenery is kept low-saturation so these stand out.
CATEGORIES = (
    Category("traffic cone", CONE, (0.5, 0.5, 0.75), (235, 105, 20), "cone"),
    Category("trash can", CYL, (0.6, 0.6, 1.0), (20, 140, 150), "grain"),
    Category("fire hydrant", CYL, (0.36, 0.36, 0.8), (205, 30, 30), "grain"),
    Category("vending machine", BOX, (0.9, 0.8, 1.9), (40, 90, 210), "vending"),
    Category("bench", BOX, (1.8, 0.55, 0.5), (70, 130, 40), "wood"),  # a green park bench
    Category("beach ball", SPHERE, (0.6, 0.6, 0.6), (240, 215, 30), "grain"),
)


@dataclass
class Material:
    texture: int
    scale_u: float  # metres per texture repeat along u (0: a decal spanning the quad)
    scale_v: float
    tint: tuple[float, float, float] = (1.0, 1.0, 1.0)
    noise: float = 0.0  # amplitude of the world-space value noise that breaks repetition


@dataclass
class Instance:
    instance_id: int
    category: str
    shape: str
    centre: tuple[float, float, float]
    size: tuple[float, float, float]
    place: str
    prim: int  # index of its primitive


@dataclass
class FacePhoto:
    face_id: int
    prim: int
    place: str
    # corners of the face region in the world (for the independent checks in tests)
    centre: tuple[float, float, float]
    normal: tuple[float, float]
    width: float
    height: float


@dataclass
class World:
    """The scene as flat arrays (what the renderer reads) plus the truth about it."""

    ptype: np.ndarray  # (n,) int32
    pgeo: np.ndarray  # (n, 7) float64, see add_* for the layout per type
    pmat: np.ndarray  # (n, 6) int32 material per face
    plabel: np.ndarray  # (n,) int32 instance id or NO_LABEL
    pface: np.ndarray  # (n,) int32 face id of a face photograph quad, else -1
    poff: np.ndarray  # (n, 2) float64 texture offset (decorrelates repeats)
    mtex: np.ndarray  # (m,) int32
    mscale: np.ndarray  # (m, 2)
    mtint: np.ndarray  # (m, 3)
    mnoise: np.ndarray  # (m,)
    face_uv: np.ndarray  # (4,) face rectangle in the photo (u0, v0, u1, v1)
    floor_rects: np.ndarray  # (f, 4) x0, y0, x1, y1
    floor_mats: np.ndarray  # (f,) int32
    floor_default: int
    atlas: tx.TextureAtlas
    sky: np.ndarray  # (h, w, 3) uint8, upper hemisphere
    places: tuple[Place, ...]
    instances: list[Instance]
    faces: list[FacePhoto]
    route: Route
    scenery: list[int] = field(default_factory=list)  # primitive indices that are not instances

    def place_at(self, x: float, y: float) -> str:
        for p in self.places:
            if p.contains(x, y):
                return p.name
        return "outside"


class _Builder:
    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.ptype: list[int] = []
        self.pgeo: list[list[float]] = []
        self.pmat: list[list[int]] = []
        self.plabel: list[int] = []
        self.pface: list[int] = []
        self.poff: list[tuple[float, float]] = []
        self.materials: list[Material] = []
        self.mat_names: dict[str, int] = {}

    def material(self, name: str, m: Material) -> int:
        self.mat_names[name] = len(self.materials)
        self.materials.append(m)
        return self.mat_names[name]

    def _add(self, t: int, geo: list[float], mats: int | Sequence[int], label: int = NO_LABEL, face: int = -1) -> int:
        if isinstance(mats, int):
            mats = [mats] * 6
        self.ptype.append(t)
        self.pgeo.append(list(geo) + [0.0] * (7 - len(geo)))
        self.pmat.append(list(mats))
        self.plabel.append(label)
        self.pface.append(face)
        self.poff.append((float(self.rng.random()), float(self.rng.random())))
        return len(self.ptype) - 1

    def box(
        self,
        x0: float,
        x1: float,
        y0: float,
        y1: float,
        z0: float,
        z1: float,
        mats: int | Sequence[int],
        label: int = NO_LABEL,
    ) -> int:
        return self._add(BOX, [x0, x1, y0, y1, z0, z1], mats, label)

    def cylinder(
        self, cx: float, cy: float, r: float, z0: float, z1: float, mats: int | Sequence[int], label: int = NO_LABEL
    ) -> int:
        return self._add(CYL, [cx, cy, r, z0, z1], mats, label)

    def cone(
        self, cx: float, cy: float, r: float, z0: float, z1: float, mats: int | Sequence[int], label: int = NO_LABEL
    ) -> int:
        return self._add(CONE, [cx, cy, r, z0, z1], mats, label)

    def sphere(
        self, cx: float, cy: float, cz: float, r: float, mats: int | Sequence[int], label: int = NO_LABEL
    ) -> int:
        return self._add(SPHERE, [cx, cy, cz, r], mats, label)

    def quad(
        self, cx: float, cy: float, nx: float, ny: float, width: float, z0: float, z1: float, mat: int, face: int = -1
    ) -> int:
        """A vertical one-sided quad facing the unit normal (nx, ny); u runs left to right as seen
        from the front, along e = (-ny, nx)."""
        return self._add(QUAD, [cx, cy, -ny, nx, width / 2.0, z0, z1], mat, NO_LABEL, face)


def footprint_distance(ptype: int, geo: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """2D distance from points to a primitive's footprint (0 inside)."""
    if ptype == BOX:
        dx = np.maximum(np.maximum(geo[0] - x, x - geo[1]), 0.0)
        dy = np.maximum(np.maximum(geo[2] - y, y - geo[3]), 0.0)
        return np.hypot(dx, dy)
    if ptype in (CYL, CONE, SPHERE):
        r = geo[2] if ptype != SPHERE else geo[3]
        return np.maximum(np.hypot(x - geo[0], y - geo[1]) - r, 0.0)
    if ptype == QUAD:
        cx, cy, ex, ey, hw = geo[:5]
        w = np.clip((x - cx) * ex + (y - cy) * ey, -hw, hw)
        return np.hypot(x - (cx + w * ex), y - (cy + w * ey))
    raise ValueError(ptype)


def prim_z_range(ptype: int, geo: np.ndarray) -> tuple[float, float]:
    if ptype == BOX:
        return geo[4], geo[5]
    if ptype in (CYL, CONE):
        return geo[3], geo[4]
    if ptype == SPHERE:
        return geo[2] - geo[3], geo[2] + geo[3]
    return geo[5], geo[6]


def _move(dist: float, rel_deg: float, speed: float) -> Move:
    """A move covering ``dist`` metres (the ramps at both ends cost RAMP_S at full speed)."""
    return Move(dist / speed + RAMP_S, rel_deg, speed)


def loop_route() -> Route:
    """The default 120 s closed walk: plaza -> street -> hall -> corridor -> plaza.

    Every 30 s window holds a steady move of >= 4 s, and so does every 15 s window but 45-60 s (the
    stop at the face photograph: turns, steps under 4 s, pauses); the moves cover forward, backward,
    left, right and the four diagonals relative to the heading; there are pauses of >= 3 s, turns in
    place both ways and a walking turn; the plaza is visited at the start and again at the end.
    Headings: 0 = north, 90 = east.
    """
    d = math.sqrt(2.0)
    legs: list[Leg] = [
        _move(5.0, 0.0, 1.25),  # plaza, heading north: forward to (14, 8)
        _move(8.0 * d, -45.0, 1.4),  # forward-left to (6, 16)
        _move(7.5, 0.0, 1.25),  # forward into the street, (6, 23.5)
        Pause(3.5),
        Turn(2.0, 180.0),  # turn round in place (to the right): heading south
        _move(6.5, 180.0, 1.1),  # backward (north) to (6, 30)
        Turn(2.0, -90.0),  # turn left in place: heading east
        _move(6.0, -90.0, 1.2),  # left (north) to (6, 36)
        Turn(1.5, 45.0),  # heading south-east
        _move(7.5, -135.0, 1.45),  # backward-left (north) through the hall's door to (6, 43.5), by 45.6 s
        # 45-60 s, the face photograph: only turns, short steps (< 4 s: no steady motion) and pauses,
        # so that this 15 s motion clip is `none` (metadata.motion_clip_seconds: 15 in configs/sample.yaml)
        Turn(1.5, -45.0),  # heading east
        _move(1.75 * d, -45.0, 1.2),  # a step forward-left (north-east) to (7.75, 45.25)
        Pause(1.0),
        _move(1.75 * d, -45.0, 1.2),  # another to (9.5, 47)
        Turn(1.8, -90.0),  # face the north wall and its face photograph
        _move(1.5, 0.0, 1.0),  # step towards it: (9.5, 48.5)
        Pause(3.5),
        _move(13.5, 90.0, 1.4),  # right (east) along the wall to (23, 48.5)
        _move(12.5, 180.0, 1.4),  # backward (south) into the corridor to (23, 36)
        Turn(2.0, 180.0),  # turn round in place: heading south
        _move(2.8 * d, 45.0, 0.9),  # forward-right (south-west) to (20.2, 33.2)
        _move(2.8 * d, -45.0, 0.9),  # forward-left (south-east) to (23, 30.4)
        _move(4.4, 0.0, 1.2),  # forward (south) to (23, 26)
        Arc(4.0, 1.0, -90.0),  # walk on turning left (radius 8/pi): heading east, at (23 + r, 26 - r)
        _move((23.0 + 8.0 / math.pi - 14.0) * d, 135.0, 1.4),  # backward-right (south-west) to x = 14
        Turn(1.6, -90.0),  # heading north again
    ]
    # backward (south) to the start, timed so that the loop lasts exactly 120 s
    legs.append(Goto(120.0 - sum(leg.duration for leg in legs), (14.0, 3.0)))
    return Route((14.0, 3.0), 0.0, legs)


def short_route() -> Route:
    """A 56 s closed walk for quick runs: plaza -> street -> plaza (back after > 20 s), a pause, turns."""
    d = math.sqrt(2.0)
    legs: list[Leg] = [
        _move(5.0, 0.0, 1.25),  # forward (north) to (14, 8)
        _move(8.0 * d, -45.0, 1.4),  # forward-left to (6, 16)
        _move(14.0, 0.0, 1.3),  # forward into the street to (6, 30)
        Pause(3.5),
        Turn(2.0, -90.0),  # heading west
        _move(13.0, -90.0, 1.3),  # left (south) to (6, 17)
        Goto(9.1, (14.0, 9.0)),  # backward-left (south-east)
        Turn(2.0, 90.0),  # heading north
        _move(6.0, 180.0, 1.2),  # backward (south) to the start
    ]
    return Route((14.0, 3.0), 0.0, legs)


ROUTES = {"loop": loop_route, "short": short_route}

# Walls across the mouths at y = 20 (x ranges): gates of 2.4 m where the loop crosses (x = 6 out of
# the plaza, x = 22 back into it).
GATE_WALLS = ((2.0, 4.8), (7.2, 10.0), (19.0, 20.8), (23.2, 27.0))
GATE_WALL_HEIGHT = 3.0

# Face photograph slots: (place, centre x, centre y, normal x, normal y); the route passes each
# within ~3.5-4 m, facing it for a while (slot 0 has a pause in front of it).
FACE_SLOTS = (
    ("hall", 9.5, 52.0, 0.0, -1.0),
    ("street", 2.0, 33.0, 1.0, 0.0),
    ("corridor", 27.0, 28.0, -1.0, 0.0),
)
FACE_WIDTH = 1.8
FACE_Z = (0.6, 2.4)

# Poster slots on walls: (x, y, normal x, normal y); jittered along the wall per seed.
POSTER_SLOTS = (
    # street, west facade (x = 2) and east facade (x = 10)
    (2.0, 23.5, 1.0, 0.0),
    (2.0, 28.0, 1.0, 0.0),
    (2.0, 38.0, 1.0, 0.0),
    (10.0, 25.0, -1.0, 0.0),
    (10.0, 31.0, -1.0, 0.0),
    (10.0, 36.5, -1.0, 0.0),
    # plaza: south facade, west, east, north
    (5.0, 0.0, 0.0, 1.0),
    (11.0, 0.0, 0.0, 1.0),
    (19.0, 0.0, 0.0, 1.0),
    (25.0, 0.0, 0.0, 1.0),
    (0.0, 8.0, 1.0, 0.0),
    (0.0, 14.0, 1.0, 0.0),
    (28.0, 6.0, -1.0, 0.0),
    (28.0, 13.0, -1.0, 0.0),
    (12.5, 20.0, 0.0, -1.0),
    (16.5, 20.0, 0.0, -1.0),
    # hall: north, west, east, south walls
    (3.0, 52.0, 0.0, -1.0),
    (15.5, 52.0, 0.0, -1.0),
    (20.5, 52.0, 0.0, -1.0),
    (25.0, 52.0, 0.0, -1.0),
    (0.0, 44.0, 1.0, 0.0),
    (0.0, 49.0, 1.0, 0.0),
    (28.0, 43.0, -1.0, 0.0),
    (28.0, 48.5, -1.0, 0.0),
    (12.5, 40.0, 0.0, 1.0),
    (16.5, 40.0, 0.0, 1.0),
    # corridor: west (x = 19) and east (x = 27) walls
    (19.0, 22.5, 1.0, 0.0),
    (19.0, 27.5, 1.0, 0.0),
    (19.0, 32.5, 1.0, 0.0),
    (19.0, 37.5, 1.0, 0.0),
    (27.0, 24.0, -1.0, 0.0),
    (27.0, 33.0, -1.0, 0.0),
    (27.0, 37.5, -1.0, 0.0),
)


@functools.lru_cache(maxsize=2)
def textures_for(seed: int) -> tuple[tx.TextureAtlas, np.ndarray]:
    """The seed's textures (packed with mips) and sky; their own random stream, cached because
    they cost seconds and never change for a seed (the arrays are read-only)."""
    rng = np.random.default_rng([seed, 0x5A3B1E, 1])
    texs: dict[str, np.ndarray] = {
        "paving": tx.tex_paving(rng),
        "asphalt": tx.tex_asphalt(rng),
        "brick": tx.tex_brick(rng),
        "facade_a": tx.tex_facade(rng),
        "facade_b": tx.tex_facade(rng),
        "plaster": tx.tex_plaster(rng),
        "tiles": tx.tex_floor_tiles(rng),
        "lino": tx.tex_linoleum(rng),
        "ceiling": tx.tex_ceiling(rng),
        "roof": tx.tex_roof(rng),
        "grain": tx.tex_grain(rng),
        "wood": tx.tex_wood(rng),
        "cone": tx.tex_cone(rng),
        "vending": tx.tex_vending(rng),
        "photo": tx.astronaut_photo(),
    }
    for i in range(len(POSTER_SLOTS)):
        texs[f"poster{i}"] = tx.tex_poster(rng)
    sky = tx.tex_sky(rng)
    atlas = tx.pack(texs)
    for a in (atlas.texels, atlas.offsets, atlas.widths, atlas.heights, atlas.n_levels, sky):
        a.flags.writeable = False
    return atlas, sky


# Placement zones of the default layout: (place, x_min, y_min, x_max, y_max), clipped to the place.
# The street's east side and the corridor's west side lie behind the gate walls as seen from the
# plaza, so that what is placed there is seen only from inside (its last appearance is not at the
# end of the loop).
ZONES: dict[str, tuple[str, float, float, float, float]] = {
    "plaza": ("plaza", 0.0, 0.0, 28.0, 20.0),
    "street": ("street", 2.0, 20.0, 10.0, 40.0),
    "street east": ("street", 7.0, 20.0, 10.0, 40.0),
    "hall": ("hall", 0.0, 40.0, 28.0, 52.0),
    "hall south": ("hall", 10.5, 40.0, 17.0, 47.5),
    "corridor west": ("corridor", 19.0, 20.0, 21.8, 40.0),
    "corridor": ("corridor", 19.0, 20.0, 27.0, 40.0),
}

# The default sample's objects (``n_per_category=None``): per category, how many in which zone.
# Chosen so that the default sample exercises every QA rule (tests/test_sample_oracle.py): counts
# of 1-9 per category, so VOC totals per view spread over 1..8; categories whose first and whose
# last appearances fall in different places, so that both VOO subtypes find concepts >= 2 s apart
# (the plaza, seen at the start and again at the end, holds only two categories); most categories
# spread over places the route visits in different 30 s windows, so streaming counts rise.
DEFAULT_LAYOUT: dict[str, tuple[tuple[str, int], ...]] = {
    "traffic cone": (("street east", 2), ("hall south", 3), ("corridor west", 3)),
    "trash can": (("hall south", 5),),
    "fire hydrant": (("street east", 3),),
    "vending machine": (("hall south", 2),),
    "bench": (("plaza", 3),),
    "beach ball": (("corridor west", 6),),
}


def _category_zones(category: str, n_per_category: int | None, rng: np.random.Generator) -> list[str]:
    """The zones (``ZONES``) of a category's instances, in placement order."""
    if n_per_category is None:
        return [zone for zone, n in DEFAULT_LAYOUT[category] for _ in range(n)]
    # uniform: half of each category in the plaza (visited twice), the rest spread over the others
    others = [str(p) for p in rng.permutation(["street", "hall", "corridor"])]
    order = ["plaza", others[0], others[1], "plaza", others[2], "plaza"]
    return [order[k % len(order)] for k in range(n_per_category)]


def build_world(seed: int = 0, route: str = "loop", n_per_category: int | None = None, n_faces: int = 1) -> World:
    """The world of a sample: deterministic in (seed, route, n_per_category, n_faces).

    ``n_per_category``: that many instances of every category (half in the plaza); None: the
    default sample's ``DEFAULT_LAYOUT``."""
    if route not in ROUTES:
        raise ValueError(f"unknown route {route!r}: expected one of {sorted(ROUTES)}")
    if not 0 <= n_faces <= len(FACE_SLOTS):
        raise ValueError(f"faces must be in [0, {len(FACE_SLOTS)}], got {n_faces}")
    rng = np.random.default_rng([seed, 0x5A3B1E, 2])  # layout: texture offsets, posters, objects
    b = _Builder(rng)
    trt = ROUTES[route]()

    # ---- textures and materials ----------------------------------------------------------
    atlas, sky = textures_for(seed)
    T = atlas.index
    M = b.material
    paving = M("paving", Material(T("paving"), 6.0, 6.0, noise=0.25))
    asphalt = M("asphalt", Material(T("asphalt"), 8.0, 8.0, noise=0.3))
    brick = M("brick", Material(T("brick"), 4.0, 4.0, noise=0.25))
    facade_a = M("facade_a", Material(T("facade_a"), 12.0, 12.0, noise=0.2))
    facade_b = M("facade_b", Material(T("facade_b"), 12.0, 12.0, (0.95, 1.0, 1.05), noise=0.2))
    plaster = M("plaster", Material(T("plaster"), 4.0, 4.0, noise=0.25))
    tiles = M("tiles", Material(T("tiles"), 8.0, 8.0, noise=0.2))
    lino = M("lino", Material(T("lino"), 6.0, 6.0, noise=0.25))
    ceiling = M("ceiling", Material(T("ceiling"), 4.8, 4.8, noise=0.1))
    roof = M("roof", Material(T("roof"), 4.0, 4.0))
    stone = M("stone", Material(T("paving"), 3.0, 3.0, (0.9, 0.9, 0.95), noise=0.2))
    bark = M("bark", Material(T("wood"), 0.8, 1.5, (0.55, 0.45, 0.35), noise=0.2))
    leaves = M("leaves", Material(T("grain"), 1.0, 1.0, (0.42, 0.55, 0.30), noise=0.4))
    metal = M("metal", Material(T("grain"), 1.0, 1.0, (0.45, 0.45, 0.48), noise=0.1))
    lamp = M("lamp", Material(T("grain"), 1.0, 1.0, (1.25, 1.25, 1.2)))
    photo = M("photo", Material(T("photo"), 0.0, 0.0))
    poster_mats = [M(f"poster{i}", Material(T(f"poster{i}"), 0.0, 0.0)) for i in range(len(POSTER_SLOTS))]
    cat_mats = {}
    for c in CATEGORIES:
        tint = (
            (1.0, 1.0, 1.0) if c.texture == "cone" else (c.colour[0] / 200.0, c.colour[1] / 200.0, c.colour[2] / 200.0)
        )
        if c.shape == BOX:
            su, sv = max(c.size[0], c.size[1]), c.size[2]
        elif c.shape == SPHERE:
            su, sv = math.pi * c.size[0], c.size[2]
        else:  # one wrap round the circumference, the height once
            su, sv = math.pi * c.size[0], c.size[2]
        cat_mats[c.name] = M(c.name, Material(T(c.texture), su, sv, tint, noise=0.08))

    # ---- scenery -------------------------------------------------------------------------
    def mats(default: int, **faces: int) -> list[int]:
        m = [default] * 6
        for k, v in faces.items():
            m[["nx", "px", "ny", "py", "nz", "pz"].index(k)] = v
        return m

    scenery_start = 0
    b.box(-12, 40, -12, 0, 0, 12, mats(roof, py=facade_a))  # south of the plaza
    b.box(-12, 0, 0, 20, 0, 14, mats(roof, px=brick))  # west
    b.box(28, 40, 0, 20, 0, 10, mats(roof, nx=facade_b))  # east
    b.box(10, 19, 20, 40, 0, 9, mats(roof, nx=brick, ny=facade_a, px=plaster, py=plaster))  # the block
    b.box(-12, 2, 20, 40, 0, 11, mats(roof, px=facade_b, ny=facade_b, py=plaster))  # west of the street
    b.box(27, 40, 20, 40, 0, 9, mats(roof, nx=plaster, ny=facade_a, py=plaster))  # east of the corridor
    b.box(19, 27, 20, 20.4, 3.5, 9, mats(roof, ny=brick, py=plaster))  # over the corridor's mouth
    b.box(-1, 29, 52, 53, 0, 5.3, plaster)  # hall: north wall
    b.box(-1, 0, 40, 52, 0, 5.3, plaster)  # west wall
    b.box(28, 29, 40, 52, 0, 5.3, plaster)  # east wall
    b.box(2, 4.5, 39.6, 40, 0, 8, mats(plaster, ny=brick))  # hall front on the street, with a door
    b.box(7.5, 10, 39.6, 40, 0, 8, mats(plaster, ny=brick))
    b.box(4.5, 7.5, 39.6, 40, 3, 8, mats(plaster, ny=brick))  # lintel
    b.box(19, 27, 39.7, 40, 3.5, 5, plaster)  # corridor -> hall lintel
    b.box(-1, 29, 40, 53, 5, 5.3, mats(roof, nz=ceiling))  # hall ceiling
    b.box(19, 27, 20, 40, 3.5, 3.8, mats(roof, nz=ceiling))  # corridor ceiling
    for px_, py_ in ((14.5, 44.5), (3.5, 47.5), (25.5, 46.0)):  # hall pillars
        b.cylinder(px_, py_, 0.35, 0, 5, mats(plaster))
    b.cylinder(7, 7, 1.8, 0, 0.5, mats(stone))  # fountain
    b.cylinder(7, 7, 0.25, 0, 2.0, mats(stone))
    b.sphere(7, 7, 2.3, 0.45, mats(stone))
    for tx_, ty_ in ((22.5, 4.5), (2.5, 3.0)):  # trees
        b.cylinder(tx_, ty_, 0.16, 0, 2.6, mats(bark))
        b.sphere(tx_, ty_, 3.6, 1.3, mats(leaves))
    for lx, ly in ((11.0, 15.0), (20.0, 12.0), (2.6, 25.0), (9.4, 32.0), (2.6, 37.0), (1.0, 18.0)):
        b.cylinder(lx, ly, 0.08, 0, 4.2, mats(metal))  # lamp posts
        b.sphere(lx, ly, 4.35, 0.18, mats(lamp))
    b.box(8.3, 9.8, 27.0, 29.0, 0, 2.6, mats(plaster, pz=roof))  # a kiosk in the street
    # garden walls narrow the street's and the corridor's mouths to gates the route walks through,
    # so that from the plaza only a slice of each is in view (the revisit does not see everything)
    for x0, x1 in GATE_WALLS:
        b.box(x0, x1, 19.8, 20.2, 0, GATE_WALL_HEIGHT, mats(brick, pz=stone))
    # faces: the astronaut photograph on the chosen slots
    faces: list[FacePhoto] = []
    used_slots = []
    for f_id in range(n_faces):
        place, cx, cy, nx, ny = FACE_SLOTS[f_id]
        p = b.quad(cx + 0.01 * nx, cy + 0.01 * ny, nx, ny, FACE_WIDTH, FACE_Z[0], FACE_Z[1], photo, face=f_id)
        u0, v0, u1, v1 = tx.ASTRONAUT_FACE_UV
        ex, ey = -ny, nx
        uc, vc = 0.5 * (u0 + u1), 0.5 * (v0 + v1)
        fcx = cx + 0.01 * nx + (uc - 0.5) * FACE_WIDTH * ex
        fcy = cy + 0.01 * ny + (uc - 0.5) * FACE_WIDTH * ey
        fcz = FACE_Z[1] - vc * (FACE_Z[1] - FACE_Z[0])
        faces.append(
            FacePhoto(
                f_id, p, place, (fcx, fcy, fcz), (nx, ny), (u1 - u0) * FACE_WIDTH, (v1 - v0) * (FACE_Z[1] - FACE_Z[0])
            )
        )
        used_slots.append((cx, cy))
    # posters (skip slots too close to a face photograph)
    for i, (cx, cy, nx, ny) in enumerate(POSTER_SLOTS):
        if any(math.hypot(cx - fx, cy - fy) < 2.5 for fx, fy in used_slots):
            continue
        ex, ey = -ny, nx
        j = float(rng.uniform(-0.6, 0.6))
        w = float(rng.uniform(0.8, 1.2))
        z0 = float(rng.uniform(0.7, 1.1))
        b.quad(cx + 0.01 * nx + j * ex, cy + 0.01 * ny + j * ey, nx, ny, w, z0, z0 + 1.5 * w, poster_mats[i])
    n_scenery = len(b.ptype)

    # ---- object instances ----------------------------------------------------------------
    route_xy = np.array([trt.pose(t)[:2] for t in np.arange(0.0, trt.length + 1e-9, 0.1)])
    scen_geo = [
        (b.ptype[k], np.asarray(b.pgeo[k]))
        for k in range(n_scenery)
        if prim_z_range(b.ptype[k], np.asarray(b.pgeo[k]))[0] < 2.0
    ]
    face_zones = []
    for f in faces:
        nx, ny = f.normal
        ex, ey = -ny, nx
        cx, cy = f.centre[0], f.centre[1]
        face_zones.append((cx, cy, nx, ny, ex, ey))
    places = {p.name: p for p in PLACES}
    instances: list[Instance] = []
    placed: list[tuple[float, float, float]] = []  # x, y, radius
    iid = 0
    for cat in CATEGORIES:
        for k, zone in enumerate(_category_zones(cat.name, n_per_category, rng)):
            pname, zx0, zy0, zx1, zy1 = ZONES[zone]
            pl = places[pname]
            zx0, zy0, zx1, zy1 = max(zx0, pl.x_min), max(zy0, pl.y_min), min(zx1, pl.x_max), min(zy1, pl.y_max)
            sx, sy, sz = cat.size
            if cat.shape == BOX and rng.random() < 0.5:
                sx, sy = sy, sx
            rad = 0.5 * math.hypot(sx, sy)
            for _attempt in range(2000):
                x = float(rng.uniform(zx0 + 0.3 + sx / 2, zx1 - 0.3 - sx / 2))
                y = float(rng.uniform(zy0 + 0.3 + sy / 2, zy1 - 0.3 - sy / 2))
                if pl.name in ("street", "corridor") and not (pl.y_min + 1.0 < y < pl.y_max - 1.0):
                    continue  # keep doorways and mouths clear
                if np.min(np.hypot(route_xy[:, 0] - x, route_xy[:, 1] - y)) < rad + 1.0:
                    continue
                if any(math.hypot(x - ox, y - oy) < rad + orad + 0.4 for ox, oy, orad in placed):
                    continue
                if any(
                    float(footprint_distance(t, g, np.array([x]), np.array([y]))[0]) < rad + 0.2 for t, g in scen_geo
                ):
                    continue
                # keep the space in front of a face photograph clear (4.5 m out, 1.6 m either side)
                if any(
                    0 < (x - cx) * nx + (y - cy) * ny < 4.5 + rad and abs((x - cx) * ex + (y - cy) * ey) < 1.6 + rad
                    for cx, cy, nx, ny, ex, ey in face_zones
                ):
                    continue
                break
            else:  # pragma: no cover - the layout leaves plenty of room
                raise RuntimeError(f"could not place {cat.name} #{k} in {zone}")
            m = cat_mats[cat.name]
            if cat.shape == BOX:
                p = b.box(x - sx / 2, x + sx / 2, y - sy / 2, y + sy / 2, 0.0, sz, m, label=iid)
                cz = sz / 2
            elif cat.shape == CYL:
                p = b.cylinder(x, y, sx / 2, 0.0, sz, m, label=iid)
                cz = sz / 2
            elif cat.shape == CONE:
                p = b.cone(x, y, sx / 2, 0.0, sz, m, label=iid)
                cz = sz / 2
            else:
                p = b.sphere(x, y, sz / 2, sz / 2, m, label=iid)
                cz = sz / 2
            if cat.shape == BOX:
                b.poff[p] = (0.0, 0.0)  # the front texture maps once onto the box face
            instances.append(Instance(iid, cat.name, SHAPES[cat.shape], (x, y, cz), (sx, sy, sz), pname, p))
            placed.append((x, y, rad))
            iid += 1

    mt = b.materials
    floor_rects = np.array([[p.x_min, p.y_min, p.x_max, p.y_max] for p in PLACES], float)
    floor_mats = np.array(
        [{"plaza": paving, "street": asphalt, "hall": tiles, "corridor": lino}[p.name] for p in PLACES], np.int32
    )
    return World(
        ptype=np.array(b.ptype, np.int32),
        pgeo=np.array(b.pgeo, float),
        pmat=np.array(b.pmat, np.int32),
        plabel=np.array(b.plabel, np.int32),
        pface=np.array(b.pface, np.int32),
        poff=np.array(b.poff, float),
        mtex=np.array([m.texture for m in mt], np.int32),
        mscale=np.array([[m.scale_u, m.scale_v] for m in mt], float),
        mtint=np.array([m.tint for m in mt], float),
        mnoise=np.array([m.noise for m in mt], float),
        face_uv=np.array(tx.ASTRONAUT_FACE_UV, float),
        floor_rects=floor_rects,
        floor_mats=floor_mats,
        floor_default=paving,
        atlas=atlas,
        sky=sky,
        places=PLACES,
        instances=instances,
        faces=faces,
        route=trt,
        scenery=list(range(scenery_start, n_scenery)),
    )
