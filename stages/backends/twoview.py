"""The CPU pose estimator: two-view geometry between consecutive 2 FPS frames (OpenCV).

For each pair of consecutive frames: SIFT (or ORB) features, mutual ratio-test matches, then

- a rotation-only model (homography RANSAC, then the rotation that best maps the bearings): if it
  explains the matches to within ``min_parallax_deg`` the camera only turned (or stood still), so
  the step has a rotation and no translation;
- otherwise the essential matrix (RANSAC) and ``recoverPose`` give the rotation and the direction
  of translation. Monocular geometry has no scale; the step length is set to baseline / depth of
  the matched points, ``median(parallax_i / sin(angle between ray_i and t))``, which is zero at a
  standstill and comparable between views, so the fused trajectory of a source stays meaningful.

The poses are chained from the first frame (the world frame = the first camera, OpenCV axes).
Works on any perspective view (the intrinsics follow from ``hfov_deg``, py360convert's pixel
convention, see ``stages.geometry``).
"""

from __future__ import annotations

import cv2
import numpy as np

from vsi_wild.stages import geometry
from vsi_wild.stages.backends.base import BackendContext, FrameBatch, PoseResult, register

# an image's keypoints (n, 2) and their descriptors (None when it has none)
Features = tuple[np.ndarray, np.ndarray | None]


def _kabsch(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rotation R minimising sum |R a_i - b_i|^2 (rows are unit vectors)."""
    H = a.T @ b
    U, _, Vt = np.linalg.svd(H)
    D = np.diag([1.0, 1.0, np.sign(np.linalg.det(Vt.T @ U.T))])
    return Vt.T @ D @ U.T


def _angles(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.arccos(np.clip((a * b).sum(axis=1), -1.0, 1.0))


class TwoViewPoseEstimator:
    name = "twoview"
    # a frame's validity is its step's (i-1 -> i): a missed step leaves the pose as it was and the
    # next one is measured from its own two frames (read by stages.pose.estimate_chunked)
    chains_steps = True

    def __init__(
        self,
        hfov_deg: float = 90.0,
        max_width: int = 640,
        features: str = "sift",
        n_features: int = 2000,
        ratio: float = 0.8,
        min_matches: int = 25,
        min_parallax_deg: float = 0.15,
        ransac_px: float = 1.0,
        camera_height: float | None = 1.6,
        ground_min_depression_deg: float = 8.0,
        ground_max_tilt_deg: float = 25.0,
        ground_min_spread: float = 0.1,
    ):
        if features not in ("sift", "orb"):
            raise ValueError(f"twoview features must be 'sift' or 'orb', not {features!r}")
        self.hfov_deg = float(hfov_deg)
        self.max_width = int(max_width)
        self.features = features
        self.n_features = int(n_features)
        self.ratio = float(ratio)
        self.min_matches = int(min_matches)
        self.min_parallax = np.radians(min_parallax_deg)
        self.ransac_px = float(ransac_px)
        self.camera_height = camera_height
        self.ground_min_depression_deg = float(ground_min_depression_deg)
        self.ground_max_tilt_deg = float(ground_max_tilt_deg)
        self.ground_min_spread = float(ground_min_spread)
        self.last_height: float | None = None
        self.last_metric: np.ndarray | None = None  # per frame of the last estimate(): step i-1 -> i was metric
        # per frame of the last estimate(): the inlier bearings (b1, b2: unit rays in the view's camera
        # axes at frames i-1 and i) of step i-1 -> i, or None (read by stages.pose.fuse_views)
        self.last_bearings: list[tuple[np.ndarray, np.ndarray] | None] | None = None
        self._pair: tuple[np.ndarray, np.ndarray] | None = None
        if features == "sift":
            self._det: cv2.Feature2D = cv2.SIFT.create(nfeatures=self.n_features)
            self._norm = cv2.NORM_L2
        else:
            self._det = cv2.ORB.create(nfeatures=self.n_features, fastThreshold=5)
            self._norm = cv2.NORM_HAMMING
        self._matcher = cv2.BFMatcher(self._norm)

    # ------------------------------------------------------------------ one image
    def _prepare(self, image: np.ndarray) -> tuple[np.ndarray, float]:
        h, w = image.shape[:2]
        s = min(1.0, self.max_width / w)
        gray = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2GRAY)
        if s < 1.0:
            gray = cv2.resize(gray, (round(w * s), round(h * s)), interpolation=cv2.INTER_AREA)
        return gray, s

    def _features(self, gray: np.ndarray) -> Features:
        kp, desc = self._det.detectAndCompute(gray, None)  # type: ignore[call-overload]  # cv2 stubs: mask is optional (None: no mask)
        pts = np.array([k.pt for k in kp], dtype=np.float64).reshape(-1, 2)
        return pts, desc

    def _match(self, f1: Features, f2: Features) -> tuple[np.ndarray, np.ndarray]:
        (p1, d1), (p2, d2) = f1, f2
        if d1 is None or d2 is None or len(p1) < 2 or len(p2) < 2:
            return np.zeros((0, 2)), np.zeros((0, 2))
        if self._norm == cv2.NORM_L2:  # kept as bytes (rig_features); OpenCV's L2 matching is 3x faster on floats
            d1, d2 = d1.astype(np.float32, copy=False), d2.astype(np.float32, copy=False)
        fwd = self._matcher.knnMatch(d1, d2, k=2)
        bwd = {m[0].queryIdx: m[0].trainIdx for m in self._matcher.knnMatch(d2, d1, k=2) if m}
        i1, i2 = [], []
        for m in fwd:
            if len(m) < 2:
                continue
            a, b = m
            if a.distance < self.ratio * b.distance and bwd.get(a.trainIdx) == a.queryIdx:
                i1.append(a.queryIdx)
                i2.append(a.trainIdx)
        return p1[i1], p2[i2]

    # ------------------------------------------------------------------ one pair
    def relative(self, f1: Features, f2: Features, K: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
        """Motion from frame 1 to frame 2: (R, c, ok) with x2 = R (x1 - c), i.e. ``R`` rotates
        camera-1 coordinates into camera 2 and ``c`` is camera 2's centre in camera-1 coordinates
        (length = baseline / typical depth; zero when the camera only turned)."""
        self.last_height = None
        self._pair = None
        q1, q2 = self._match(f1, f2)
        if len(q1) < self.min_matches:
            return np.eye(3), np.zeros(3), False
        Kinv = np.linalg.inv(K)
        b1 = np.c_[q1, np.ones(len(q1))] @ Kinv.T
        b2 = np.c_[q2, np.ones(len(q2))] @ Kinv.T
        b1 /= np.linalg.norm(b1, axis=1, keepdims=True)
        b2 /= np.linalg.norm(b2, axis=1, keepdims=True)

        # Rotation-only model: turning in place (or standing still) explains every match.
        H, hmask = cv2.findHomography(q1, q2, cv2.RANSAC, 2.0 * self.ransac_px)
        if H is not None and hmask is not None and hmask.sum() >= self.min_matches:
            inl = hmask.ravel().astype(bool)
            R_rot = _kabsch(b1[inl], b2[inl])
            resid = _angles(b1 @ R_rot.T, b2)
            if np.median(resid) < self.min_parallax:
                self._pair = (b1[inl].astype(np.float32), b2[inl].astype(np.float32))
                return R_rot, np.zeros(3), True

        E, emask = cv2.findEssentialMat(q1, q2, K, method=cv2.RANSAC, prob=0.999, threshold=self.ransac_px)
        if E is None or E.shape != (3, 3):
            return np.eye(3), np.zeros(3), False
        n, R, t, pmask = cv2.recoverPose(E, q1, q2, K, mask=emask.copy())
        inl = pmask.ravel() > 0
        if n < self.min_matches:
            return np.eye(3), np.zeros(3), False
        t = t.ravel() / max(float(np.linalg.norm(t)), 1e-12)
        c = -R.T @ t  # camera 2's centre in camera-1 coordinates (unit length)
        # Parallax of each inlier after removing the rotation, and its angle to the motion.
        rotated = b1[inl] @ R.T
        par = _angles(rotated, b2[inl])
        sin_a = np.linalg.norm(np.cross(b2[inl], R @ c), axis=1)
        good = sin_a > 0.3
        if good.sum() < max(5, self.min_matches // 3):
            good = sin_a > 0.05
        scale = float(np.median(par[good] / sin_a[good])) if good.any() else float(np.median(par))
        self.last_height = self._ground_height(q1[inl], q2[inl], K, R, t)
        self._pair = (b1[inl].astype(np.float32), b2[inl].astype(np.float32))  # 2.4 KB per 100 matches
        return R, c * scale, True

    def _ground_height(
        self, q1: np.ndarray, q2: np.ndarray, K: np.ndarray, R: np.ndarray, t: np.ndarray
    ) -> float | None:
        """Height of camera 1 above the ground plane, in units of the baseline; None when the
        ground is not seen well enough. Points are triangulated with a unit baseline; the plane is
        a RANSAC fit among points below the horizon whose normal is near the camera's down axis."""
        if len(q1) < 12:
            return None
        P1 = K @ np.c_[np.eye(3), np.zeros(3)]
        P2 = K @ np.c_[R, t.reshape(3, 1)]
        Xh = cv2.triangulatePoints(P1, P2, q1.T.astype(np.float64), q2.T.astype(np.float64))
        X = (Xh[:3] / np.where(np.abs(Xh[3]) < 1e-12, 1e-12, Xh[3])).T
        z2 = (X @ R.T + t.reshape(1, 3))[:, 2]
        ray = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
        c = -R.T @ t.ravel()
        tri = np.arccos(
            np.clip(((X - c) / np.maximum(np.linalg.norm(X - c, axis=1, keepdims=True), 1e-12) * ray).sum(1), -1, 1)
        )
        below = (
            (X[:, 2] > 0)
            & (z2 > 0)
            & (ray[:, 1] > np.sin(np.radians(self.ground_min_depression_deg)))
            & (tri > np.radians(0.5))
        )
        pts = X[below]
        if len(pts) < 8:
            return None
        rng = np.random.default_rng(len(pts))
        best_h, best_n = None, 0
        tol = 0.03  # relative to the plane's distance
        for _ in range(64):
            sel = pts[rng.choice(len(pts), 3, replace=False)]
            nrm = np.cross(sel[1] - sel[0], sel[2] - sel[0])
            if np.linalg.norm(nrm) < 1e-12:
                continue
            nrm /= np.linalg.norm(nrm)
            if nrm[1] < 0:
                nrm = -nrm
            if nrm[1] < np.cos(np.radians(self.ground_max_tilt_deg)):
                continue
            h = float(nrm @ sel[0])
            if h <= 0:
                continue
            inl = np.abs(pts @ nrm - h) < tol * h
            if inl.sum() > best_n:
                best_n, best_h = int(inl.sum()), (nrm, inl)
        if best_h is None or best_n < max(8, 0.3 * len(pts)):
            return None
        nrm, inl = best_h
        # refine: least squares over the inliers
        P = pts[inl]
        centroid = P.mean(axis=0)
        _, S, Vt = np.linalg.svd(P - centroid)
        # Points along one line (the horizontal edges of a facade seen face-on: window sills,
        # lintels) lie in every plane through that line, a level one too, at any height: the
        # ground must spread in two directions. (Measured on the sample at 640x360: such fits were
        # off by x3 to x100 and once negative; those spreading >= 0.1 were 1.05x off, median.)
        if S[1] < self.ground_min_spread * S[0]:
            return None
        n2 = Vt[2] if Vt[2][1] > 0 else -Vt[2]
        h = float(n2 @ centroid)
        return h if h > 0 else None

    # ------------------------------------------------------------------ a sequence
    def estimate(self, batch: FrameBatch) -> PoseResult:
        """Chain the pairwise motions from the first frame. Step lengths: ``camera_height`` /
        (camera height above the ground in baselines) where the ground plane is seen, else the
        parallax-based length times the median ratio of the two over the batch (so a whole
        trajectory has one consistent scale, metres when ``camera_height`` is the true one)."""
        n = len(batch.images)
        intr = np.zeros((n, 3, 3))
        valid = np.ones(n, dtype=bool)
        steps: list[tuple[np.ndarray, np.ndarray, float | None]] = []
        bearings: list[tuple[np.ndarray, np.ndarray] | None] = [None]
        prev = None
        for i in range(n):
            image = batch.images[i]
            h, w = image.shape[:2]
            intr[i] = geometry.view_intrinsics(w, h, self.hfov_deg)
            gray, _ = self._prepare(image)
            K = geometry.view_intrinsics(gray.shape[1], gray.shape[0], self.hfov_deg)
            feats = self._features(gray)
            if prev is not None:
                R, c, ok = self.relative(prev, feats, K)
                valid[i] = ok
                steps.append((R, c, self.last_height if ok else None))
                bearings.append(self._pair if ok else None)
            prev = feats
        ratios = [
            self.camera_height / hgt / np.linalg.norm(c)
            for _, c, hgt in steps
            if self.camera_height and hgt and np.linalg.norm(c) > 0
        ]
        ratio = float(np.median(ratios)) if ratios else 1.0
        ext = np.zeros((n, 3, 4))
        R_w = np.eye(3)
        C_w = np.zeros(3)
        ext[0, :, :3] = R_w
        metric = np.zeros(n, dtype=bool)
        for i, (R, c, hgt) in enumerate(steps, start=1):
            norm = np.linalg.norm(c)
            if norm > 0 and self.camera_height and hgt:
                c = c / norm * (self.camera_height / hgt)
                metric[i] = True
            else:
                c = c * ratio
                metric[i] = norm == 0  # standing still is exact too
            # world -> cam_i: x_i = R (x_{i-1} - c) with x_{i-1} = R_w (X - C_w)
            C_w = C_w + R_w.T @ c
            R_w = R @ R_w
            ext[i, :, :3] = R_w
            ext[i, :, 3] = -R_w @ C_w
        # Which steps got their length from the ground plane (read by stages.pose.fuse_views:
        # among a rig's views, those steps are trusted over the parallax-based ones).
        self.last_metric = metric
        self.last_bearings = bearings
        return PoseResult(extrinsics=ext, intrinsics=intr, valid=valid)


# Its settings are the pose section's (keyed by the stage) and the view's geometry: no fields.
@register("pose_estimator", "twoview", fields=())
def _create(ctx: BackendContext) -> TwoViewPoseEstimator:
    return TwoViewPoseEstimator(**ctx.options)


# a rig's views at one instant: view -> (its features, the inverse of its intrinsics)
RigFeatures = dict[str, tuple[Features, np.ndarray]]


def rig_features(est: TwoViewPoseEstimator, images: dict[str, np.ndarray]) -> RigFeatures:
    """Each view's features, computed once for every match it takes part in (``rig_rotation``,
    ``stages.loops``). SIFT's descriptors are whole numbers up to 255 (OpenCV scales and rounds
    them): they are kept as bytes, a quarter of the memory (a view's 2000 take 256 KB), and
    matched as the same floats."""
    out = {}
    for v, img in images.items():
        gray, _ = est._prepare(img)
        K = geometry.view_intrinsics(gray.shape[1], gray.shape[0], est.hfov_deg)
        pts, desc = est._features(gray)
        if desc is not None and est.features == "sift":
            desc = np.clip(np.rint(desc), 0, 255).astype(np.uint8)
        out[v] = ((pts, desc), np.linalg.inv(K))
    return out


# matched bearings of a pair of views, each in its rig's (yaw-0 view's) axes: (b1 before, b2 after)
RigMatches = dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]


def rig_rotation(
    est: TwoViewPoseEstimator,
    before: dict[str, np.ndarray],
    after: dict[str, np.ndarray],
    yaws: dict[str, float],
    min_inliers: int = 20,
) -> tuple[np.ndarray, int] | None:
    """The rotation of a rig of views (one camera, views turned by ``yaws``) between two instants,
    when the camera turned too fast for any view to overlap itself: every view after is matched
    against every view before (a 70° turn brings the right view's content into the front view),
    and the rotation that maps the most bearings, expressed in the rig's (yaw-0 view's) axes, wins.

    Returns (R, inliers) with ``x_after = R x_before`` in the rig's camera axes, or None."""
    got = rig_rotation_of(est, rig_features(est, before), rig_features(est, after), yaws, min_inliers)
    return None if got is None else got[:2]


def rig_rotation_of(
    est: TwoViewPoseEstimator,
    fb: RigFeatures,
    fa: RigFeatures,
    yaws: dict[str, float],
    min_inliers: int = 20,
    view_pairs: set[tuple[str, str]] | None = None,
) -> tuple[np.ndarray, int, RigMatches] | None:
    """``rig_rotation`` of features already computed (``rig_features``), matching only
    ``view_pairs`` (before, after) when given; also returns every view pair's mutual matches as
    bearings in the rig's axes (the rotation's inliers and the rest: a step's translation is in
    the matches the rotation alone does not explain)."""
    from vsi_wild.stages.pose import yaw_matrix

    best = None
    matches: RigMatches = {}
    for u, (f1, Kinv1) in sorted(fb.items()):
        for v, (f2, Kinv2) in sorted(fa.items()):
            if view_pairs is not None and (u, v) not in view_pairs:
                continue
            q1, q2 = est._match(f1, f2)
            if len(q1) < min_inliers:
                continue
            b1 = np.c_[q1, np.ones(len(q1))] @ Kinv1.T
            b2 = np.c_[q2, np.ones(len(q2))] @ Kinv2.T
            b1 = (b1 / np.linalg.norm(b1, axis=1, keepdims=True)) @ yaw_matrix(yaws[u]).T
            b2 = (b2 / np.linalg.norm(b2, axis=1, keepdims=True)) @ yaw_matrix(yaws[v]).T
            matches[u, v] = (b1, b2)
            H, hmask = cv2.findHomography(q1, q2, cv2.RANSAC, 2.0 * est.ransac_px)
            if H is None or hmask is None or hmask.sum() < min_inliers:
                continue
            inl = hmask.ravel().astype(bool)
            R = _kabsch(b1[inl], b2[inl])
            good = int((_angles(b1 @ R.T, b2) < np.radians(0.5)).sum())
            if good >= min_inliers and (best is None or good > best[1]):
                best = (R, good)
    return None if best is None else (best[0], best[1], matches)
