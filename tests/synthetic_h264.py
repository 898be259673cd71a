"""Lossless synthetic H.264 clips without an encoder: every macroblock an I_PCM macroblock.

H.264 lets an intra macroblock carry its 384 samples raw (``mb_type`` I_PCM), and H.264
decoding is bit-exact, so *any* conforming decoder (FFmpeg on the CPU, NVDEC on the GPU) must
return exactly the YUV 4:2:0 samples written here. That makes these clips a decoder test with
an exact reference, and lets the GPU machine (which has no PyAV) make its own test video.

Stream layout: Annex B byte stream (``.h264``), Constrained Baseline profile, level 5.1, one
SPS and PPS, then one IDR picture per frame (one slice, CAVLC, deblocking off). The VUI says
BT.601 limited range and the frame rate. Width and height must be even; sizes that are not
multiples of 16 are padded (edge samples repeated) and cropped in the SPS.

The bit rate is that of raw video (1.5 bytes per pixel): for tests and benchmarks of the
decode path, not for storage.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable

import numpy as np

from hookmagic.common.errors import InvalidArgument

_EMULATION = re.compile(b"\x00\x00(?=[\x00-\x03])")


class _Bits:
    """MSB-first bit writer with Exp-Golomb codes (H.264 7.2 / 9.1)."""

    def __init__(self) -> None:
        self.bits: list[str] = []

    def u(self, n: int, value: int) -> None:
        if n:
            self.bits.append(format(value, f"0{n}b"))

    def ue(self, value: int) -> None:
        code = value + 1
        self.bits.append("0" * (code.bit_length() - 1) + format(code, "b"))

    def se(self, value: int) -> None:
        self.ue(2 * value - 1 if value > 0 else -2 * value)

    def length(self) -> int:
        return sum(len(b) for b in self.bits)

    def align_zero(self) -> None:
        self.u((-self.length()) % 8, 0)

    def trailing(self) -> None:  # rbsp_trailing_bits: a 1, then zeros to the byte boundary
        self.u(1, 1)
        self.align_zero()

    def to_bytes(self) -> bytes:
        s = "".join(self.bits)
        if len(s) % 8:
            raise AssertionError("not byte aligned")
        return int(s, 2).to_bytes(len(s) // 8, "big") if s else b""


def _nal(ref_idc: int, nal_type: int, rbsp: bytes) -> bytes:
    """Annex B NAL unit: start code, header, RBSP with emulation-prevention bytes."""
    return b"\x00\x00\x00\x01" + bytes([(ref_idc << 5) | nal_type]) + _EMULATION.sub(
        b"\x00\x00\x03", rbsp)


def _sps(mbs_w: int, mbs_h: int, crop_right: int, crop_bottom: int, fps: int) -> bytes:
    b = _Bits()
    b.u(8, 66)            # profile_idc: Baseline
    b.u(8, 0b11000000)    # constraint_set0 + set1 (Constrained Baseline), reserved zeros
    b.u(8, 51)            # level_idc 5.1
    b.ue(0)               # seq_parameter_set_id
    b.ue(0)               # log2_max_frame_num_minus4
    b.ue(2)               # pic_order_cnt_type 2: output order = decode order
    b.ue(1)               # max_num_ref_frames
    b.u(1, 0)             # gaps_in_frame_num_value_allowed_flag
    b.ue(mbs_w - 1)       # pic_width_in_mbs_minus1
    b.ue(mbs_h - 1)       # pic_height_in_map_units_minus1
    b.u(1, 1)             # frame_mbs_only_flag
    b.u(1, 1)             # direct_8x8_inference_flag
    cropped = bool(crop_right or crop_bottom)
    b.u(1, int(cropped))  # frame_cropping_flag (offsets in units of 2 samples for 4:2:0)
    if cropped:
        b.ue(0)
        b.ue(crop_right // 2)
        b.ue(0)
        b.ue(crop_bottom // 2)
    b.u(1, 1)             # vui_parameters_present_flag
    b.u(1, 0)             # aspect_ratio_info_present_flag
    b.u(1, 0)             # overscan_info_present_flag
    b.u(1, 1)             # video_signal_type_present_flag
    b.u(3, 5)             # video_format: unspecified
    b.u(1, 0)             # video_full_range_flag: limited range
    b.u(1, 1)             # colour_description_present_flag
    b.u(8, 6)             # colour_primaries: SMPTE 170M
    b.u(8, 6)             # transfer_characteristics: SMPTE 170M
    b.u(8, 6)             # matrix_coefficients: BT.601
    b.u(1, 0)             # chroma_loc_info_present_flag
    b.u(1, 1)             # timing_info_present_flag
    b.u(32, 1)            # num_units_in_tick
    b.u(32, 2 * fps)      # time_scale (two ticks per frame)
    b.u(1, 1)             # fixed_frame_rate_flag
    b.u(1, 0)             # nal_hrd_parameters_present_flag
    b.u(1, 0)             # vcl_hrd_parameters_present_flag
    b.u(1, 0)             # pic_struct_present_flag
    b.u(1, 1)             # bitstream_restriction_flag
    b.u(1, 1)             # motion_vectors_over_pic_boundaries_flag
    b.ue(0)               # max_bytes_per_pic_denom
    b.ue(0)               # max_bits_per_mb_denom
    b.ue(15)              # log2_max_mv_length_horizontal
    b.ue(15)              # log2_max_mv_length_vertical
    b.ue(0)               # max_num_reorder_frames: output without delay
    b.ue(1)               # max_dec_frame_buffering
    b.trailing()
    return _nal(3, 7, b.to_bytes())


def _pps() -> bytes:
    b = _Bits()
    b.ue(0)       # pic_parameter_set_id
    b.ue(0)       # seq_parameter_set_id
    b.u(1, 0)     # entropy_coding_mode_flag: CAVLC
    b.u(1, 0)     # bottom_field_pic_order_in_frame_present_flag
    b.ue(0)       # num_slice_groups_minus1
    b.ue(0)       # num_ref_idx_l0_default_active_minus1
    b.ue(0)       # num_ref_idx_l1_default_active_minus1
    b.u(1, 0)     # weighted_pred_flag
    b.u(2, 0)     # weighted_bipred_idc
    b.se(0)       # pic_init_qp_minus26
    b.se(0)       # pic_init_qs_minus26
    b.se(0)       # chroma_qp_index_offset
    b.u(1, 1)     # deblocking_filter_control_present_flag
    b.u(1, 0)     # constrained_intra_pred_flag
    b.u(1, 0)     # redundant_pic_cnt_present_flag
    b.trailing()
    return _nal(3, 8, b.to_bytes())


def _idr(y: np.ndarray, u: np.ndarray, v: np.ndarray, idr_pic_id: int) -> bytes:
    """One IDR picture: a slice of I_PCM macroblocks (planes already padded to 16)."""
    mbs_h, mbs_w = y.shape[0] // 16, y.shape[1] // 16
    b = _Bits()
    b.ue(0)                # first_mb_in_slice
    b.ue(7)                # slice_type: I (all slices of the picture)
    b.ue(0)                # pic_parameter_set_id
    b.u(4, 0)              # frame_num (log2_max_frame_num = 4)
    b.ue(idr_pic_id)       # idr_pic_id: differs between consecutive IDR pictures
    b.u(1, 0)              # dec_ref_pic_marking: no_output_of_prior_pics_flag
    b.u(1, 0)              #                      long_term_reference_flag
    b.se(0)                # slice_qp_delta
    b.ue(1)                # disable_deblocking_filter_idc: off
    b.ue(25)               # first macroblock's mb_type: I_PCM
    b.align_zero()         # pcm_alignment_zero_bits
    head = b.to_bytes()
    ymb = y.reshape(mbs_h, 16, mbs_w, 16).transpose(0, 2, 1, 3).reshape(-1, 256)
    umb = u.reshape(mbs_h, 8, mbs_w, 8).transpose(0, 2, 1, 3).reshape(-1, 64)
    vmb = v.reshape(mbs_h, 8, mbs_w, 8).transpose(0, 2, 1, 3).reshape(-1, 64)
    # every later macroblock starts byte aligned: ue(25) = 0000 1101 0, then 7 zero bits
    prefix = np.tile(np.array([0x0D, 0x00], np.uint8), (ymb.shape[0], 1))
    body = np.concatenate([prefix, ymb, umb, vmb], axis=1)
    rbsp = head + body[0, 2:].tobytes() + body[1:].tobytes() + b"\x80"  # + trailing bits
    return _nal(3, 5, rbsp)


def _pad(plane: np.ndarray, h: int, w: int) -> np.ndarray:
    return np.pad(plane, ((0, h - plane.shape[0]), (0, w - plane.shape[1])), mode="edge")


def write_pcm_h264(path: str | os.PathLike, frames: Iterable[tuple[np.ndarray, np.ndarray,
                   np.ndarray]], fps: int = 30) -> Path:
    """Write YUV 4:2:0 frames ``(y, u, v)`` (uint8; ``y`` H×W, ``u``/``v`` H/2×W/2) as a
    lossless H.264 Annex B stream of I_PCM macroblocks. Returns the path.

    Samples are clipped to 1..255 (early H.264 versions forbid PCM samples of 0)."""
    path = Path(path)
    out = bytearray()
    shape = None
    for i, (y, u, v) in enumerate(frames):
        y, u, v = (np.asarray(p) for p in (y, u, v))
        if shape is None:
            h, w = y.shape[:2] if y.ndim == 2 else (-1, -1)
            if y.ndim != 2 or h % 2 or w % 2 or h < 16 or w < 16:
                raise InvalidArgument(f"y must be an H×W plane with even H, W >= 16, got "
                                      f"shape {y.shape}")
            shape = (h, w)
            mbs_h, mbs_w = -(-h // 16), -(-w // 16)
            out += _sps(mbs_w, mbs_h, 16 * mbs_w - w, 16 * mbs_h - h, int(fps))
            out += _pps()
        if y.shape != shape or u.shape != (shape[0] // 2, shape[1] // 2) or u.shape != v.shape:
            raise InvalidArgument(f"frame {i}: planes {y.shape}, {u.shape}, {v.shape} do not "
                                  f"match {shape} 4:2:0")
        if y.dtype != np.uint8 or u.dtype != np.uint8 or v.dtype != np.uint8:
            raise InvalidArgument(f"frame {i}: planes must be uint8")
        ph, pw = 16 * mbs_h, 16 * mbs_w
        planes = [np.clip(_pad(y, ph, pw), 1, 255), np.clip(_pad(u, ph // 2, pw // 2), 1, 255),
                  np.clip(_pad(v, ph // 2, pw // 2), 1, 255)]
        out += _idr(*planes, idr_pic_id=i % 2)
    if shape is None:
        raise InvalidArgument("no frames to write")
    path.write_bytes(bytes(out))
    return path


def synthetic_yuv_frames(n: int, width: int = 320, height: int = 240,
                         seed: int = 0) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``n`` *synthetic* YUV 4:2:0 frames in limited range: moving luma bands over fixed noise,
    smooth chroma gradients (so an RGB conversion's chroma upsampling changes little)."""
    if width % 2 or height % 2:
        raise InvalidArgument("width and height must be even")
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    noise = rng.integers(0, 12, (height, width))
    cy, cx = np.mgrid[0:height // 2, 0:width // 2]
    out = []
    for i in range(n):
        y = 16 + (xx + 2 * yy + 5 * i + noise) % 220
        u = 128 + 40 * np.sin((cx + 3 * i) / 23.0) * np.cos(cy / 17.0)
        v = 128 + 40 * np.cos((cy + 2 * i) / 19.0)
        out.append((y.astype(np.uint8), np.rint(u).astype(np.uint8), np.rint(v).astype(np.uint8)))
    return out


def yuv420_to_rgb_bt601(y: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Reference BT.601 limited-range YUV 4:2:0 → RGB (H×W×3 uint8): pixel (x, y) takes chroma
    sample ((x + 1) // 2, y // 2), the one FFmpeg's swscale takes with point sampling and full
    chroma interpolation."""
    h, w = y.shape
    cols = np.minimum((np.arange(w) + 1) // 2, w // 2 - 1)
    rows = np.arange(h) // 2
    yf = (y.astype(np.float64) - 16) * (255 / 219)
    uf = (u[rows][:, cols].astype(np.float64) - 128) * (255 / 224)
    vf = (v[rows][:, cols].astype(np.float64) - 128) * (255 / 224)
    r = yf + 1.402 * vf
    g = yf - 0.344136 * uf - 0.714136 * vf
    b = yf + 1.772 * uf
    return np.clip(np.rint(np.stack([r, g, b], -1)), 0, 255).astype(np.uint8)
