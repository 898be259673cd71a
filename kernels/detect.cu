// Detector post-processing: non-maximum suppression (the bitmask algorithm of torchvision's CUDA
// nms, batched over images and optionally class-aware) and box decoding.
//
// NMS in two kernels per call:
//   nms_mask:   for boxes sorted by score (order[] from a sort), 64 x 64 tiles of IoU tests;
//               bit j of mask[i][jb] is set when box i suppresses box 64*jb + j (j after i,
//               IoU > threshold, same class when classes are given). IoU exactly as torchvision
//               computes it for float32 boxes.
//   nms_gather: one warp per image walks the sorted boxes in order, keeps each box no kept box
//               suppressed, ORs its mask row into the removed set, and writes the kept original
//               indices (in score order, as torchvision returns them) and their count.
#define NMS_TPB 64

__device__ __forceinline__ bool nms_iou_above(const float4 a, const float4 b, float threshold) {
  const float left = fmaxf(a.x, b.x), right = fminf(a.z, b.z);
  const float top = fmaxf(a.y, b.y), bottom = fminf(a.w, b.w);
  const float width = fmaxf(right - left, 0.f), height = fmaxf(bottom - top, 0.f);
  const float inter = width * height;
  const float sa = (a.z - a.x) * (a.w - a.y);
  const float sb = (b.z - b.x) * (b.w - b.y);
  return __fdiv_rn(inter, sa + sb - inter) > threshold;
}

// boxes: (batch, n, 4) float32 xyxy; order: (batch, n) int64 indices sorted by descending score;
// classes: (batch, n) int64 or null; mask: (batch, n, col_blocks) uint64.
// grid (col_blocks, col_blocks, batch), block NMS_TPB.
extern "C" __global__ void __launch_bounds__(NMS_TPB) nms_mask(const float* __restrict__ boxes,
    const long long* __restrict__ order, const long long* __restrict__ classes, int n, float threshold,
    unsigned long long* __restrict__ mask) {
  const int row_start = blockIdx.y, col_start = blockIdx.x, b = blockIdx.z;
  if (row_start > col_start) return;
  const int col_blocks = (n + NMS_TPB - 1) / NMS_TPB;
  const int row_size = min(n - row_start * NMS_TPB, NMS_TPB);
  const int col_size = min(n - col_start * NMS_TPB, NMS_TPB);
  const float4* bx = reinterpret_cast<const float4*>(boxes) + (size_t)b * n;
  const long long* ord = order + (size_t)b * n;
  const long long* cls = classes ? classes + (size_t)b * n : nullptr;
  __shared__ float4 cb[NMS_TPB];
  __shared__ long long cc[NMS_TPB];
  if (threadIdx.x < col_size) {
    const long long j = ord[col_start * NMS_TPB + threadIdx.x];
    cb[threadIdx.x] = bx[j];
    cc[threadIdx.x] = cls ? cls[j] : 0;
  }
  __syncthreads();
  if (threadIdx.x < row_size) {
    const int i = row_start * NMS_TPB + threadIdx.x;
    const long long oi = ord[i];
    const float4 a = bx[oi];
    const long long ca = cls ? cls[oi] : 0;
    unsigned long long t = 0;
    const int start = (row_start == col_start) ? threadIdx.x + 1 : 0;
    for (int j = start; j < col_size; ++j)
      if (cc[j] == ca && nms_iou_above(a, cb[j], threshold)) t |= 1ULL << j;
    mask[((size_t)b * n + i) * col_blocks + col_start] = t;
  }
}

// grid (batch), block 32 (one warp), dynamic shared memory col_blocks * 8 bytes.
// keep: (batch, n) int64 (the first count[b] entries are written); count: (batch) int64.
extern "C" __global__ void __launch_bounds__(32) nms_gather(const unsigned long long* __restrict__ mask,
    const long long* __restrict__ order, int n, long long* __restrict__ keep, long long* __restrict__ count) {
  extern __shared__ unsigned long long removed[];
  const int b = blockIdx.x, lane = threadIdx.x;
  const int col_blocks = (n + NMS_TPB - 1) / NMS_TPB;
  for (int j = lane; j < col_blocks; j += 32) removed[j] = 0;
  __syncwarp();
  const unsigned long long* m = mask + (size_t)b * n * col_blocks;
  const long long* ord = order + (size_t)b * n;
  long long* kb = keep + (size_t)b * n;
  long long kept = 0;
  for (int i = 0; i < n; ++i) {
    const int nb = i / NMS_TPB, ib = i % NMS_TPB;
    if (!(removed[nb] & (1ULL << ib))) {  // every lane reads the same word: a uniform branch
      if (lane == 0) kb[kept] = ord[i];
      ++kept;
      const unsigned long long* row = m + (size_t)i * col_blocks;
      for (int j = nb + lane; j < col_blocks; j += 32) removed[j] |= row[j];
      __syncwarp();
    }
  }
  if (lane == 0) count[b] = kept;
}

// ---- box decoding ----
// mode 0: (cx, cy, w, h) -> (x1, y1, x2, y2), as torchvision.ops.box_convert(in_fmt="cxcywh")
// mode 1: deltas against anchors (xyxy), as torchvision's BoxCoder.decode_single with weights
//         (wx, wy, ww, wh) and dw/dh clamped at `clip`
// then (optional) undo a letterbox: x = (x - pad_x) / scale, y = (y - pad_y) / scale
// then (optional, clip_w > 0) clamp x to [0, clip_w] and y to [0, clip_h] (clip_boxes_to_image).
// pred: (batch * n, 4) float32 with a row stride of `stride` floats (detector heads put scores
// after the box); anchors: (n, 4) float32, shared by the batch; out: (batch * n, 4) float32.
extern "C" __global__ void decode_boxes(const float* __restrict__ pred, int stride,
    const float* __restrict__ anchors, long long total, int n, int mode, float wx, float wy, float ww, float wh,
    float clip, int undo, float scale, float pad_x, float pad_y, float clip_w, float clip_h,
    float* __restrict__ out) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const float* p = pred + i * stride;
    float x1, y1, x2, y2;
    if (mode == 0) {
      const float cx = p[0], cy = p[1], w = p[2], h = p[3];
      x1 = cx - 0.5f * w; y1 = cy - 0.5f * h; x2 = cx + 0.5f * w; y2 = cy + 0.5f * h;
    } else {
      const float* a = anchors + (i % n) * 4;
      const float widths = a[2] - a[0], heights = a[3] - a[1];
      const float ctr_x = a[0] + 0.5f * widths, ctr_y = a[1] + 0.5f * heights;
      const float dx = p[0] / wx, dy = p[1] / wy;
      const float dw = fminf(p[2] / ww, clip), dh = fminf(p[3] / wh, clip);
      const float pcx = dx * widths + ctr_x, pcy = dy * heights + ctr_y;
      const float pw = expf(dw) * widths, ph = expf(dh) * heights;
      const float hw = 0.5f * pw, hh = 0.5f * ph;
      x1 = pcx - hw; y1 = pcy - hh; x2 = pcx + hw; y2 = pcy + hh;
    }
    if (undo) {
      x1 = (x1 - pad_x) / scale; x2 = (x2 - pad_x) / scale;
      y1 = (y1 - pad_y) / scale; y2 = (y2 - pad_y) / scale;
    }
    if (clip_w > 0.f) {
      x1 = fminf(fmaxf(x1, 0.f), clip_w); x2 = fminf(fmaxf(x2, 0.f), clip_w);
      y1 = fminf(fmaxf(y1, 0.f), clip_h); y2 = fminf(fmaxf(y2, 0.f), clip_h);
    }
    float4 r = make_float4(x1, y1, x2, y2);
    *reinterpret_cast<float4*>(out + i * 4) = r;
  }
}
