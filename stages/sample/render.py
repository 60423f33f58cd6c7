"""A numba ray caster for the sample world: equirectangular panoramas and perspective views.

The camera never pitches or rolls, so every image column (of a panorama or of a level perspective
view) is a vertical half-plane through the camera at one azimuth. Per column the caster intersects
the horizontal ray with every primitive's 2D footprint (box, circle, segment) once, sorts the hits
by distance, and then per pixel only solves the (horizontal distance, height) problem inside that
plane against those candidates, stopping at the first candidate farther than the nearest hit.
Texture lookups pick a mip level from the pixel's footprint on the surface (no shimmering) and
sample it bilinearly.

Rays are given per column as an azimuth in the camera frame (``lon = atan2(x, y)``, the geometry
convention) and per pixel as ``tan(elevation)``; both come from stages/geometry.py so that the
panorama and the truth views use exactly the project's pixel conventions.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import njit, prange

from vsi_wild.stages import geometry
from vsi_wild.stages.sample.world import BOX, CONE, CYL, FACE_LABEL, NO_LABEL, QUAD, SPHERE, World, prim_z_range

# Light direction (from the surface towards the sun: south-east, high) and the shading it gives:
# 0.6 + 0.4 * |n . L| (the absolute value stands in for bounce light, so nothing is black).
LIGHT = np.array([0.45, -0.55, 0.70]) / np.linalg.norm([0.45, -0.55, 0.70])
SKY_DIST = 1e9


@njit(cache=True, inline="always", error_model="numpy")
def _hash01(ix: int | np.int64, iy: int | np.int64, seed: int | np.int64) -> float | np.floating:
    h = (ix * 374761393 + iy * 668265263 + seed * 1442695041) & 0xFFFFFFFF
    h = ((h ^ (h >> 13)) * 1274126177) & 0xFFFFFFFF
    h = h ^ (h >> 16)
    return h / 4294967295.0


@njit(cache=True, error_model="numpy", fastmath=True)
def _value_noise(u: float, v: float, seed: int | np.int64) -> float | np.floating:
    x0 = math.floor(u)
    y0 = math.floor(v)
    fx = u - x0
    fy = v - y0
    fx = fx * fx * (3.0 - 2.0 * fx)
    fy = fy * fy * (3.0 - 2.0 * fy)
    ix = np.int64(x0)
    iy = np.int64(y0)
    a = _hash01(ix, iy, seed)
    b = _hash01(ix + 1, iy, seed)
    c = _hash01(ix, iy + 1, seed)
    d = _hash01(ix + 1, iy + 1, seed)
    return (a * (1 - fx) + b * fx) * (1 - fy) + (c * (1 - fx) + d * fx) * fy


@njit(cache=True, error_model="numpy", fastmath=True)
def _sample(texels: np.ndarray, off: int, w: int, h: int, fu: float, fv: float, wrap: bool, out: np.ndarray) -> None:
    """Bilinear sample of one mip level at texture coordinates (fu, fv) (1 = one texture)."""
    x = fu * w - 0.5
    y = fv * h - 0.5
    x0 = math.floor(x)
    y0 = math.floor(y)
    fx = x - x0
    fy = y - y0
    ix0: int | np.int64 = np.int64(x0)
    iy0: int | np.int64 = np.int64(y0)
    ix1 = ix0 + 1
    iy1 = iy0 + 1
    if wrap:  # tiled textures are powers of two
        ix0 &= w - 1
        ix1 &= w - 1
        iy0 &= h - 1
        iy1 &= h - 1
    else:
        ix0 = min(max(ix0, 0), w - 1)
        ix1 = min(max(ix1, 0), w - 1)
        iy0 = min(max(iy0, 0), h - 1)
        iy1 = min(max(iy1, 0), h - 1)
    # levels are stored column-major (x * h + y): an image column walks down a wall's texture
    a = off + ix0 * h + iy0
    b = off + ix1 * h + iy0
    c = off + ix0 * h + iy1
    d = off + ix1 * h + iy1
    for k in range(3):
        out[k] = (texels[a, k] * (1 - fx) + texels[b, k] * fx) * (1 - fy) + (
            texels[c, k] * (1 - fx) + texels[d, k] * fx
        ) * fy


@njit(cache=True, parallel=True, error_model="numpy", fastmath=True)
def render_columns(
    ox: float,
    oy: float,
    oz: float,
    yaw_rad: float,
    col_az: np.ndarray,
    tan_el: np.ndarray,
    pix_angle: float,
    want_rgb: bool,
    ptype: np.ndarray,
    pgeo: np.ndarray,
    pzr: np.ndarray,
    pmat: np.ndarray,
    plabel: np.ndarray,
    pface: np.ndarray,
    poff: np.ndarray,
    face_uv: np.ndarray,
    mtex: np.ndarray,
    mscale: np.ndarray,
    mtint: np.ndarray,
    mnoise: np.ndarray,
    floor_rects: np.ndarray,
    floor_mats: np.ndarray,
    floor_default: int | np.int64,
    texels: np.ndarray,
    toff: np.ndarray,
    tw: np.ndarray,
    th: np.ndarray,
    tlev: np.ndarray,
    sky: np.ndarray,
    light: np.ndarray,
    out_rgb: np.ndarray,
    out_id: np.ndarray,
) -> None:
    """Render columns ``i`` of an image into ``out_rgb[i, j]`` / ``out_id[i, j]`` (column-major).

    ``col_az[i]``: the column's azimuth in the camera frame (radians, + right of forward);
    ``tan_el[i, j]``: tangent of pixel (i, j)'s elevation; the camera's heading is ``yaw_rad``.
    """
    W = col_az.shape[0]
    H = tan_el.shape[1]
    N = ptype.shape[0]
    sky_h = sky.shape[0]
    sky_w = sky.shape[1]
    for i in prange(W):
        az = col_az[i] + yaw_rad
        hx = math.sin(az)
        hy = math.cos(az)
        cidx = np.empty(N, np.int64)
        cin = np.empty(N)
        cout = np.empty(N)
        caux = np.empty(N)
        caux2 = np.empty(N)
        clo = np.empty(N)  # elevation tangents outside [clo, chi] cannot hit the candidate
        chi = np.empty(N)
        t_top = -1e300  # rays above every candidate's chi go to the sky
        nc = 0
        for p in range(N):
            t = ptype[p]
            s_in = 0.0
            s_out = 0.0
            aux = 0.0
            aux2 = 0.0
            if t == BOX:
                lo = -1e300
                hi = 1e300
                face = -1.0
                ok = True
                if abs(hx) < 1e-12:
                    if ox < pgeo[p, 0] or ox > pgeo[p, 1]:
                        ok = False
                else:
                    a = (pgeo[p, 0] - ox) / hx
                    b = (pgeo[p, 1] - ox) / hx
                    if a > b:
                        a, b = b, a
                    if a > lo:
                        lo = a
                        face = 0.0 if hx > 0 else 1.0
                    hi = min(hi, b)
                if ok:
                    if abs(hy) < 1e-12:
                        if oy < pgeo[p, 2] or oy > pgeo[p, 3]:
                            ok = False
                    else:
                        a = (pgeo[p, 2] - oy) / hy
                        b = (pgeo[p, 3] - oy) / hy
                        if a > b:
                            a, b = b, a
                        if a > lo:
                            lo = a
                            face = 2.0 if hy > 0 else 3.0
                        hi = min(hi, b)
                if not ok or hi < lo or hi < 0.0:
                    continue
                s_in = lo
                s_out = hi
                aux = face
            elif t in (CYL, CONE, SPHERE):
                r = pgeo[p, 3] if t == SPHERE else pgeo[p, 2]
                dx = pgeo[p, 0] - ox
                dy = pgeo[p, 1] - oy
                sc = dx * hx + dy * hy
                d2 = dx * dx + dy * dy - sc * sc
                if d2 >= r * r:
                    continue
                half = math.sqrt(r * r - d2)
                if sc + half < 0.0:
                    continue
                s_in = sc - half
                s_out = sc + half
                aux = sc
                aux2 = d2
            elif t == QUAD:
                cx = pgeo[p, 0]
                cy = pgeo[p, 1]
                ex = pgeo[p, 2]
                ey = pgeo[p, 3]
                hw = pgeo[p, 4]
                # one-sided: seen only from the side its normal (ey, -ex) points to
                if hx * ey - hy * ex >= 0.0:
                    continue
                den = hx * ey - hy * ex
                # solve o + s h = c + w e
                qx = cx - ox
                qy = cy - oy
                s = (qx * ey - qy * ex) / den
                w = (qx * hy - qy * hx) / den
                if s <= 0.0 or w < -hw or w > hw:
                    continue
                s_in = s
                s_out = s
                aux = 0.5 * (w / hw + 1.0)
            else:
                continue
            # the elevation range that can reach the primitive's height range over [s_in, s_out]
            zlo = pzr[p, 0] - oz
            zhi = pzr[p, 1] - oz
            if s_in <= 1e-9:
                hi_t = 1e300 if zhi > 0.0 else zhi / max(s_out, 1e-9)
                lo_t = -1e300 if zlo < 0.0 else zlo / max(s_out, 1e-9)
            else:
                hi_t = zhi / s_in if zhi > 0.0 else zhi / s_out
                lo_t = zlo / s_in if zlo < 0.0 else zlo / s_out
            t_top = max(t_top, hi_t)
            # insertion into the list sorted by s_in
            k = nc
            while k > 0 and cin[k - 1] > s_in:
                cidx[k] = cidx[k - 1]
                cin[k] = cin[k - 1]
                cout[k] = cout[k - 1]
                caux[k] = caux[k - 1]
                caux2[k] = caux2[k - 1]
                clo[k] = clo[k - 1]
                chi[k] = chi[k - 1]
                k -= 1
            cidx[k] = p
            cin[k] = s_in
            cout[k] = s_out
            caux[k] = aux
            caux2[k] = aux2
            clo[k] = lo_t
            chi[k] = hi_t
            nc += 1

        col = np.empty(3)
        for j in range(H):
            T = tan_el[i, j]
            best_s = SKY_DIST
            best_p = -1  # -1 sky, -2 floor
            best_face: int | np.int64 = 0
            best_u = 0.0
            if T < -1e-12:
                best_s = -oz / T
                best_p = -2
            for c in range(nc if t_top >= T else 0):
                if cin[c] >= best_s:
                    break
                if chi[c] < T or clo[c] > T:
                    continue
                p = cidx[c]
                t = ptype[p]
                if t in (BOX, CYL):
                    if t == BOX:
                        z0 = pgeo[p, 4]
                        z1 = pgeo[p, 5]
                    else:
                        z0 = pgeo[p, 3]
                        z1 = pgeo[p, 4]
                    if T > 1e-12:
                        a = (z0 - oz) / T
                        b = (z1 - oz) / T
                        cap = 4
                    elif T < -1e-12:
                        a = (z1 - oz) / T
                        b = (z0 - oz) / T
                        cap = 5
                    else:
                        if oz < z0 or oz > z1:
                            continue
                        a = -1e300
                        b = 1e300
                        cap = 4
                    enter = max(cin[c], a)
                    ex_ = min(cout[c], b)
                    if enter > ex_ or enter < 0.0 or enter >= best_s:
                        continue
                    best_s = enter
                    best_p = p
                    best_face = (np.int64(caux[c]) if t == BOX else 0) if cin[c] >= a else cap
                elif t == QUAD:
                    z = oz + cin[c] * T
                    if z < pgeo[p, 5] or z > pgeo[p, 6]:
                        continue
                    best_s = cin[c]
                    best_p = p
                    best_face = 0
                    best_u = caux[c]
                elif t == SPHERE:
                    sc = caux[c]
                    rr = pgeo[p, 3] * pgeo[p, 3] - caux2[c]
                    dz = oz - pgeo[p, 2]
                    a = 1.0 + T * T
                    bq = -sc + T * dz
                    cq = sc * sc + dz * dz - rr
                    disc = bq * bq - a * cq
                    if disc < 0.0:
                        continue
                    s = (-bq - math.sqrt(disc)) / a
                    if s < 0.0 or s >= best_s:
                        continue
                    best_s = s
                    best_p = p
                    best_face = 0
                else:  # CONE: radius k * (z1 - z) for z in [z0, z1]
                    sc = caux[c]
                    d2 = caux2[c]
                    z0 = pgeo[p, 3]
                    z1 = pgeo[p, 4]
                    k = pgeo[p, 2] / (z1 - z0)
                    A = z1 - oz
                    a = 1.0 - k * k * T * T
                    bq = -2.0 * sc + 2.0 * k * k * A * T
                    cq = sc * sc + d2 - k * k * A * A
                    s_hit = 1e300
                    if abs(a) < 1e-12:
                        if abs(bq) > 1e-12:
                            s = -cq / bq
                            z = oz + s * T
                            if s > 0.0 and z >= z0 and z <= z1:
                                s_hit = s
                    else:
                        disc = bq * bq - 4.0 * a * cq
                        if disc >= 0.0:
                            sq = math.sqrt(disc)
                            r1 = (-bq - sq) / (2.0 * a)
                            r2 = (-bq + sq) / (2.0 * a)
                            if r1 > r2:
                                r1, r2 = r2, r1
                            z = oz + r1 * T
                            if r1 > 0.0 and z >= z0 and z <= z1:
                                s_hit = r1
                            else:
                                z = oz + r2 * T
                                if r2 > 0.0 and z >= z0 and z <= z1:
                                    s_hit = r2
                    if s_hit >= best_s:
                        continue
                    best_s = s_hit
                    best_p = p
                    best_face = 0

            # ---- label ----
            label = NO_LABEL
            hxp = ox + best_s * hx
            hyp = oy + best_s * hy
            hzp = oz + best_s * T
            v_quad = 0.0
            if best_p >= 0:
                label = plabel[best_p]
                if ptype[best_p] == QUAD:
                    v_quad = (pgeo[best_p, 6] - hzp) / (pgeo[best_p, 6] - pgeo[best_p, 5])
                    f = pface[best_p]
                    if (
                        f >= 0
                        and best_u >= face_uv[0]
                        and best_u <= face_uv[2]
                        and v_quad >= face_uv[1]
                        and v_quad <= face_uv[3]
                    ):
                        label = FACE_LABEL + f
            out_id[i, j] = label
            if not want_rgb:
                continue

            # ---- colour ----
            if best_p == -1:
                # sky rows run from the zenith (0) to the horizon (1) as 1 / (1 + tan(el)): cheaper
                # than atan, and the sky is procedural anyway
                fu = az / (2.0 * math.pi)
                fu -= math.floor(fu)
                fv = 1.0 / (1.0 + T)
                x = fu * sky_w - 0.5
                y = min(max(fv * sky_h - 0.5, 0.0), sky_h - 1.0)
                x0 = math.floor(x)
                y0 = math.floor(y)
                fx = x - x0
                fy = y - y0
                ix0 = np.int64(x0) % sky_w
                ix1 = (ix0 + 1) % sky_w
                iy0: int | np.int64 = np.int64(y0)
                iy1: int | np.int64 = min(iy0 + 1, sky_h - 1)
                for k in range(3):
                    v = (sky[iy0, ix0, k] * (1 - fx) + sky[iy0, ix1, k] * fx) * (1 - fy) + (
                        sky[iy1, ix0, k] * (1 - fx) + sky[iy1, ix1, k] * fx
                    ) * fy
                    out_rgb[i, j, k] = np.uint8(min(max(v + 0.5, 0.0), 255.0))
                continue
            nx = 0.0
            ny = 0.0
            nz = 1.0
            if best_p == -2:
                m = floor_default
                for q in range(floor_rects.shape[0]):
                    if floor_rects[q, 0] <= hxp <= floor_rects[q, 2] and floor_rects[q, 1] <= hyp <= floor_rects[q, 3]:
                        m = floor_mats[q]
                        break
                u = hxp
                v = hyp
                offu = 0.0
                offv = 0.0
                seed = 7
                quad_w = 0.0
            else:
                p = best_p
                t = ptype[p]
                offu = poff[p, 0]
                offv = poff[p, 1]
                seed = p + 11
                quad_w = 0.0
                if t == BOX:
                    m = pmat[p, best_face]
                    if best_face <= 1:
                        nx = -1.0 if best_face == 0 else 1.0
                        nz = 0.0
                        u = hyp - pgeo[p, 2]
                        v = pgeo[p, 5] - hzp
                    elif best_face <= 3:
                        ny = -1.0 if best_face == 2 else 1.0
                        nz = 0.0
                        u = hxp - pgeo[p, 0]
                        v = pgeo[p, 5] - hzp
                    else:
                        nz = -1.0 if best_face == 4 else 1.0
                        u = hxp - pgeo[p, 0]
                        v = hyp - pgeo[p, 2]
                elif t == QUAD:
                    m = pmat[p, 0]
                    nx = pgeo[p, 3]
                    ny = -pgeo[p, 2]
                    nz = 0.0
                    u = best_u
                    v = v_quad
                    quad_w = 2.0 * pgeo[p, 4]
                else:
                    cx = pgeo[p, 0]
                    cy = pgeo[p, 1]
                    dx = hxp - cx
                    dy = hyp - cy
                    if t == SPHERE:
                        m = pmat[p, 0]
                        r = pgeo[p, 3]
                        dz = hzp - pgeo[p, 2]
                        nx = dx / r
                        ny = dy / r
                        nz = dz / r
                        u = (math.atan2(dx, dy) + math.pi) * r
                        v = pgeo[p, 2] + r - hzp
                    elif best_face == 5 or best_face == 4:
                        m = pmat[p, 5]
                        nz = 1.0 if best_face == 5 else -1.0
                        u = dx
                        v = dy
                    else:
                        m = pmat[p, 0]
                        r = pgeo[p, 2]
                        rho = math.sqrt(dx * dx + dy * dy) + 1e-12
                        if t == CYL:
                            nx = dx / rho
                            ny = dy / rho
                            nz = 0.0
                        else:
                            k = r / (pgeo[p, 4] - pgeo[p, 3])
                            inv = 1.0 / math.sqrt(1.0 + k * k)
                            nx = dx / rho * inv
                            ny = dy / rho * inv
                            nz = k * inv
                        u = (math.atan2(dx, dy) + math.pi) * r
                        v = pgeo[p, 4] - hzp
            tex = mtex[m]
            su = mscale[m, 0]
            sv = mscale[m, 1]
            # pixel footprint on the surface -> mip level
            inv_len = 1.0 / math.sqrt(1.0 + T * T)
            dist = best_s / inv_len
            cos_inc = abs((nx * hx + ny * hy) * inv_len + nz * T * inv_len)
            foot = dist * pix_angle / max(cos_inc, 0.25)
            if su > 0.0:
                fu = u / su + offu
                fv = v / sv + offv
                texel = su / tw[tex, 0]
                wrap = True
            else:
                fu = u
                fv = v
                texel = quad_w / tw[tex, 0]
                wrap = False
            lev = 0
            if foot > texel:
                lev = min(np.int64(math.log2(foot / texel) + 0.25), tlev[tex] - 1)
            _sample(texels, toff[tex, lev], tw[tex, lev], th[tex, lev], fu, fv, wrap, col)
            shade = 0.6 + 0.4 * abs(nx * light[0] + ny * light[1] + nz * light[2])
            amp = mnoise[m]
            if amp > 0.0:
                nval = _value_noise(u * 0.9 + 0.37 * seed, v * 0.9, seed)
                shade *= 1.0 + amp * (2.0 * nval - 1.0)
            for k in range(3):
                val = col[k] * mtint[m, k] * shade
                out_rgb[i, j, k] = np.uint8(min(max(val + 0.5, 0.0), 255.0))


class Camera:
    """The rays of one image kind (an equirect panorama or a level perspective view)."""

    def __init__(self, col_az: np.ndarray, tan_el: np.ndarray, pix_angle: float):
        self.col_az = np.ascontiguousarray(col_az, dtype=np.float64)
        self.tan_el = np.ascontiguousarray(tan_el, dtype=np.float64)
        self.pix_angle = float(pix_angle)
        self.width, self.height = self.tan_el.shape

    @classmethod
    def equirect(cls, width: int, height: int) -> Camera:
        u = np.arange(width, dtype=np.float64)
        v = np.arange(height, dtype=np.float64)
        lon, _ = geometry.equirect_to_lonlat(u, np.zeros_like(u), width, height)
        _, lat = geometry.equirect_to_lonlat(np.zeros_like(v), v, width, height)
        tan_el = np.broadcast_to(np.tan(lat)[None, :], (width, height))
        return cls(lon, tan_el, math.pi / height)

    @classmethod
    def view(cls, width: int, height: int, hfov_deg: float, yaw_deg: float) -> Camera:
        d = geometry.view_rays(width, height, hfov_deg, yaw_deg)  # (h, w, 3) camera frame
        hor = np.hypot(d[..., 0], d[..., 1])
        az = np.arctan2(d[..., 0], d[..., 1])
        # a level view's column is one azimuth: all rows agree to rounding
        spread = np.abs(geometry.wrap_deg(np.degrees(az - az[height // 2][None, :]))).max()
        if spread > 1e-6:
            raise ValueError(f"view column azimuths disagree by {spread} deg (pitched view?)")
        tan_el = (d[..., 2] / hor).T
        pix = 2.0 * math.tan(math.radians(hfov_deg) / 2.0) / (width - 1)
        return cls(az[height // 2], tan_el, pix)


class Renderer:
    def __init__(self, world: World):
        self.w = world
        a = world.atlas
        zr = np.array([prim_z_range(t, g) for t, g in zip(world.ptype, world.pgeo, strict=True)], float).reshape(-1, 2)
        self.args = (
            world.ptype,
            world.pgeo,
            zr,
            world.pmat,
            world.plabel,
            world.pface,
            world.poff,
            world.face_uv,
            world.mtex,
            world.mscale,
            world.mtint,
            world.mnoise,
            world.floor_rects,
            world.floor_mats,
            np.int64(world.floor_default),
            a.texels,
            a.offsets,
            a.widths,
            a.heights,
            a.n_levels,
            world.sky,
            LIGHT,
        )

    def render(
        self, cam: Camera, x: float, y: float, z: float, yaw_deg: float, want_rgb: bool = True
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """(rgb (h, w, 3) uint8 or None, ids (h, w) int32) seen from (x, y, z) at heading yaw."""
        rgb = np.empty((cam.width, cam.height, 3), np.uint8) if want_rgb else np.empty((1, 1, 3), np.uint8)
        ids = np.empty((cam.width, cam.height), np.int32)
        render_columns(
            float(x),
            float(y),
            float(z),
            math.radians(yaw_deg),
            cam.col_az,
            cam.tan_el,
            cam.pix_angle,
            want_rgb,
            *self.args,
            rgb,
            ids,
        )
        ids_hw = np.ascontiguousarray(ids.T)
        return (np.ascontiguousarray(rgb.transpose(1, 0, 2)) if want_rgb else None), ids_hw


def set_threads(n: int | None) -> None:
    if n:
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]  # numba.config sets its settings through globals() at import: invisible to mypy
