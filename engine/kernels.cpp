// Dispatch, PreparedInput and the portable scalar kernels: the reference the
// SIMD builds are tested against, and the path for CPUs without AVX2.

#include "engine/kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "engine/error.h"
#include "engine/kernels_internal.h"
#include "engine/quant_k.h"

namespace specd {

// ------------------------------------------------------------- ISA choice ---

namespace {

#if defined(__x86_64__) || defined(__i386__)
void cpuid(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
    __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}

uint64_t xgetbv0() {
    uint32_t lo, hi;
    // Encoded by the assembler without -mxsave, so this file stays ISA-flag free.
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (static_cast<uint64_t>(hi) << 32) | lo;
}

Isa detect_cpu_isa() {
    uint32_t r[4];
    cpuid(0, 0, r);
    const uint32_t max_leaf = r[0];
    if (max_leaf < 7) return Isa::Scalar;
    cpuid(1, 0, r);
    const bool osxsave = (r[2] >> 27) & 1, avx = (r[2] >> 28) & 1, fma = (r[2] >> 12) & 1, f16c = (r[2] >> 29) & 1;
    if (!osxsave || !avx) return Isa::Scalar;
    const uint64_t xcr0 = xgetbv0();
    const bool os_ymm = (xcr0 & 0x6) == 0x6;     // SSE + AVX state
    const bool os_zmm = (xcr0 & 0xe6) == 0xe6;   // + opmask, ZMM_Hi256, Hi16_ZMM
    cpuid(7, 0, r);
    const bool avx2 = (r[1] >> 5) & 1, bmi2 = (r[1] >> 8) & 1;
    const bool f512 = (r[1] >> 16) & 1, dq = (r[1] >> 17) & 1, bw = (r[1] >> 30) & 1, vl = (r[1] >> 31) & 1;
    const bool vnni = (r[2] >> 11) & 1;
    if (!os_ymm || !avx2 || !fma || !f16c || !bmi2) return Isa::Scalar;
    if (os_zmm && f512 && dq && bw && vl && vnni) return Isa::Avx512;
    return Isa::Avx2;
}
// AMX tiles with int8 products (CPUID.7.0:EDX bits 24 and 25), and Linux's
// permission for the tile data state, which a process must ask for once
// (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) or its first tile
// instruction faults.
bool detect_amx() {
    uint32_t r[4];
    cpuid(0, 0, r);
    if (r[0] < 7) return false;
    cpuid(7, 0, r);
    if (!((r[3] >> 24) & 1) || !((r[3] >> 25) & 1)) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}
#else
Isa detect_cpu_isa() { return Isa::Scalar; }
bool detect_amx() { return false; }
#endif

// SPECD_AMX=0 (or off, false) leaves AMX unused; set_amx_enabled overrides.
bool amx_from_environment() {
    const char* v = std::getenv("SPECD_AMX");
    if (v == nullptr) return true;
    const std::string s(v);
    return !(s == "0" || s == "off" || s == "false");
}

std::atomic<bool>& amx_switch() {
    static std::atomic<bool> on{amx_from_environment()};
    return on;
}

}  // namespace

bool amx_available() {
    static const bool ok = detect_amx();
    return ok;
}

bool amx_enabled() { return amx_switch().load(std::memory_order_relaxed) && amx_available(); }

void set_amx_enabled(bool on) { amx_switch().store(on, std::memory_order_relaxed); }

Isa cpu_isa() {
    static const Isa isa = detect_cpu_isa();
    return isa;
}

bool isa_supported(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(cpu_isa()); }

Isa best_isa() {
    const Isa cpu = cpu_isa();
    const char* env = std::getenv("SPECD_ISA");
    if (env == nullptr || *env == '\0') return cpu;
    const std::string v(env);
    Isa want;
    if (v == "scalar") want = Isa::Scalar;
    else if (v == "avx2") want = Isa::Avx2;
    else if (v == "avx512") want = Isa::Avx512;
    else throw Error("SPECD_ISA=" + v + " is not one of scalar, avx2, avx512");
    return static_cast<int>(want) < static_cast<int>(cpu) ? want : cpu;
}

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::Scalar: return "scalar";
        case Isa::Avx2: return "avx2";
        case Isa::Avx512: return "avx512";
    }
    return "unknown";
}

// ---------------------------------------------------------- PreparedInput ---

namespace {

constexpr size_t kAlign = 64;

size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

int64_t round16(int64_t k) { return (k + 15) / 16 * 16; }

bool is_quant(TensorType t) { return PreparedInput::quantized_layout(t); }

// Bytes of the float layout, which is the larger of the two for any shape.
size_t float_layout_bytes(int rows, int64_t k) {
    return align_up(static_cast<size_t>(rows) * static_cast<size_t>(round16(k)) * sizeof(float));
}

size_t quant_layout_bytes(int rows, int64_t k) {
    const size_t r = static_cast<size_t>(rows), nb = static_cast<size_t>(k / kQuantBlock);
    return align_up(r * static_cast<size_t>(k)) + align_up(r * nb * sizeof(QuantMeta)) + align_up(r * nb * sizeof(HalfSums));
}

}  // namespace

void PreparedInput::FreeAligned::operator()(void* p) const { ::operator delete(p, std::align_val_t(kAlign)); }

PreparedInput::PreparedInput() = default;
PreparedInput::~PreparedInput() = default;
PreparedInput::PreparedInput(PreparedInput&&) noexcept = default;
PreparedInput& PreparedInput::operator=(PreparedInput&&) noexcept = default;

void PreparedInput::reserve(int max_rows, int64_t max_k) {
    if (max_rows < 0 || max_k < 0) throw Error("PreparedInput::reserve: negative size");
    const size_t want = std::max(float_layout_bytes(max_rows, max_k), quant_layout_bytes(max_rows, max_k));
    if (want <= capacity_bytes_) return;
    buffer_.reset(static_cast<unsigned char*>(::operator new(want, std::align_val_t(kAlign))));
    capacity_bytes_ = want;
    f32_ = nullptr;
    q8_ = nullptr;
    qm_ = nullptr;
    hs_ = nullptr;
    rows_ = 0;
    k_ = kp_ = 0;
}

void PreparedInput::set_shape(TensorType weight_type, int rows, int64_t k) {
    if (rows < 0 || k < 0) throw Error("PreparedInput::set_shape: negative size");
    if (!tensor_type_supported(static_cast<uint32_t>(weight_type))) {
        throw Error("PreparedInput::set_shape: unsupported weight type " + std::to_string(static_cast<uint32_t>(weight_type)));
    }
    if (is_quant(weight_type) && k % kQuantBlock != 0) {
        throw Error(std::string("matmul: K = ") + std::to_string(k) + " is not a multiple of 32 for " +
                    tensor_type_name(weight_type) + " weights");
    }
    const size_t need = is_quant(weight_type) ? quant_layout_bytes(rows, k) : float_layout_bytes(rows, k);
    if (need > capacity_bytes_) reserve(rows, k);  // beyond the reservation: the one place that allocates
    type_ = weight_type;
    rows_ = rows;
    k_ = k;
    kp_ = round16(k);
    layout();
}

int32_t PreparedInput::correction_multiplier(TensorType type) {
    switch (type) {
        case TensorType::Q8_0: return -128;
        case TensorType::Q4_0: return -8;
        case TensorType::Q2_K:
        case TensorType::Q3_K:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K:
        case TensorType::Q5_0:
        case TensorType::Q5_1:
        case TensorType::IQ4_NL:
        case TensorType::IQ4_XS: return 1;
        default: return 0;
    }
}

bool PreparedInput::serves(TensorType type) const {
    return correction_multiplier(type) == correction_multiplier(type_);
}

void PreparedInput::layout() {
    unsigned char* base = buffer_.get();
    const size_t r = static_cast<size_t>(rows_);
    f32_ = nullptr;
    q8_ = nullptr;
    qm_ = nullptr;
    hs_ = nullptr;
    if (base == nullptr) return;  // nothing reserved and an empty shape
    if (quantized()) {
        const size_t nb = static_cast<size_t>(n_blocks());
        q8_ = reinterpret_cast<int8_t*>(base);
        qm_ = reinterpret_cast<QuantMeta*>(base + align_up(r * static_cast<size_t>(k_)));
        hs_ = reinterpret_cast<HalfSums*>(reinterpret_cast<unsigned char*>(qm_) + align_up(r * nb * sizeof(QuantMeta)));
        return;
    }
    f32_ = reinterpret_cast<float*>(base);
}

void PreparedInput::prepare_rows(Isa isa, const float* x, int64_t ldx, int row_begin, int row_end) {
    if (row_begin < 0 || row_end > rows_ || row_begin > row_end) {
        throw Error("PreparedInput::prepare_rows: rows [" + std::to_string(row_begin) + ", " + std::to_string(row_end) +
                    ") outside the shape's " + std::to_string(rows_));
    }
    if (!isa_supported(isa)) throw Error(std::string("matmul: ISA ") + isa_name(isa) + " is not supported by this CPU");
    if (quantized()) {
        for (int r = row_begin; r < row_end; ++r) {
            const float* xr = x + static_cast<int64_t>(r) * ldx;
            const kern::QuantDst dst{q8_ + static_cast<int64_t>(r) * kQuantBlock, qm_ + r,
                                     static_cast<int64_t>(rows_) * kQuantBlock, rows_,
                                     correction_multiplier(type_)};
            switch (isa) {
                case Isa::Avx512: kern::quantize_act_avx512(xr, k_, dst); break;
                case Isa::Avx2: kern::quantize_act_avx2(xr, k_, dst); break;
                case Isa::Scalar: kern::quantize_act_scalar(xr, k_, dst); break;
            }
            if (correction_multiplier(type_) == 1) {
                // Plain integer sums times d: the same bits on every ISA.
                for (int64_t b = 0; b < n_blocks(); ++b) {
                    const int8_t* q = q8_block(b, r);
                    int32_t lo = 0, hi = 0;
                    for (int j = 0; j < 16; ++j) {
                        lo += q[j];
                        hi += q[16 + j];
                    }
                    const float d = q8_scale(b, r);
                    hs_[b * rows_ + r] = {d * static_cast<float>(lo), d * static_cast<float>(hi)};
                }
            }
        }
        return;
    }
    const int64_t chunks = kp_ / 16;
    for (int r = row_begin; r < row_end; ++r) {
        const float* xr = x + static_cast<int64_t>(r) * ldx;
        for (int64_t c = 0; c < chunks; ++c) {
            float* dst = f32_ + (c * rows_ + r) * 16;
            const int64_t n = std::min<int64_t>(16, k_ - c * 16);
            std::memcpy(dst, xr + c * 16, static_cast<size_t>(n) * sizeof(float));
            std::fill(dst + n, dst + 16, 0.0f);
        }
    }
}

// ----------------------------------------------------------- scalar kernels ---

namespace kern {

void quantize_act_scalar(const float* x, int64_t k, const QuantDst& dst) {
    for (int64_t b = 0; b < k / kQuantBlock; ++b) {
        int8_t* q = dst.q + b * dst.stride;
        const float* xb = x + b * kQuantBlock;
        float amax = 0.0f;
        for (int j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
        const float db = amax / 127.0f;
        const float id = db != 0.0f ? 1.0f / db : 0.0f;
        int32_t sum = 0;
        for (int j = 0; j < kQuantBlock; ++j) {
            // |x * id| <= 127 up to rounding, so the result fits int8.
            const float v = std::round(xb[j] * id);
            int qi = 0;  // NaN stays 0
            if (v >= 127.0f) qi = 127;
            else if (v <= -127.0f) qi = -127;
            else if (v == v) qi = static_cast<int>(v);
            q[j] = static_cast<int8_t>(qi);
            sum += qi;
        }
        dst.meta[b * dst.mstride] = {dst.corr_mul * sum, db};
    }
}

namespace {

template <TensorType T>
float load_w(const void* row, int64_t k) {
    if constexpr (T == TensorType::F32) return static_cast<const float*>(row)[k];
    if constexpr (T == TensorType::F16) return fp16_to_fp32(static_cast<const uint16_t*>(row)[k]);
    if constexpr (T == TensorType::BF16) return bf16_to_fp32(static_cast<const uint16_t*>(row)[k]);
    return 0.0f;
}

template <TensorType T>
void matmul_float_scalar(const unsigned char* W, size_t row_bytes, const PreparedInput& x, float* y, int64_t ldy,
                         int64_t n0, int64_t n1) {
    const int64_t K = x.k();
    for (int64_t n = n0; n < n1; ++n) {
        const void* w = W + static_cast<size_t>(n) * row_bytes;
        for (int t = 0; t < x.rows(); ++t) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; ++k) acc += load_w<T>(w, k) * x.f32_chunk(k / 16, t)[k % 16];
            y[t * ldy + n] = acc;
        }
    }
}

// Integer dot products per block, scaled in float: sum_b dw_b * dx_b * isum_b.
template <TensorType T>
void matmul_quant_scalar(const unsigned char* W, size_t row_bytes, const PreparedInput& x, float* y, int64_t ldy,
                         int64_t n0, int64_t n1) {
    const int64_t nb = x.n_blocks();
    for (int64_t n = n0; n < n1; ++n) {
        const unsigned char* w = W + static_cast<size_t>(n) * row_bytes;
        for (int t = 0; t < x.rows(); ++t) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                const int8_t* xq = x.q8_block(b, t);
                int32_t isum = 0;
                float dw;
                if constexpr (T == TensorType::Q8_0) {
                    const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(w) + b;
                    for (int j = 0; j < kQuantBlock; ++j) isum += blk->qs[j] * xq[j];
                    dw = fp16_to_fp32(blk->d);
                } else {
                    const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(w) + b;
                    for (int j = 0; j < kQuantBlock / 2; ++j) {
                        isum += ((blk->qs[j] & 0x0f) - 8) * xq[j];
                        isum += ((blk->qs[j] >> 4) - 8) * xq[j + 16];
                    }
                    dw = fp16_to_fp32(blk->d);
                }
                acc += dw * x.q8_scale(b, t) * static_cast<float>(isum);
            }
            y[t * ldy + n] = acc;
        }
    }
}

}  // namespace

namespace {

// Q4_K's eight 6-bit (scale, min) pairs of a super-block (scale_min_k4 of
// quant_k.cpp, unpacked all at once).
void q4_k_scales(const uint8_t* s, int sc[8], int m[8]) {
    for (int g = 0; g < 4; ++g) {
        sc[g] = s[g] & 63;
        m[g] = s[g + 4] & 63;
        sc[g + 4] = (s[g + 8] & 0x0f) | ((s[g] >> 6) << 4);
        m[g + 4] = (s[g + 8] >> 4) | ((s[g + 4] >> 6) << 4);
    }
}

// Q6_K's code (0..63) of element e (0..255) of a super-block.
int q6_k_code(const BlockQ6_K& b, int e) {
    const int h = e / 128, l = e % 32, part = (e % 128) / 32;
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    const int low = part == 0 ? ql[l] & 0x0f : part == 1 ? ql[l + 32] & 0x0f : part == 2 ? ql[l] >> 4 : ql[l + 32] >> 4;
    return low | (((qh[l] >> (2 * part)) & 3) << 4);
}

// Q3_K's value (-4..3) of element e: 2 bits from qs, the high bit from hmask.
int q3_k_value(const BlockQ3_K& b, int e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    const int q = (b.qs[32 * h + l] >> (2 * j)) & 3;
    return q - (((b.hmask[l] >> (4 * h + j)) & 1) ? 0 : 4);
}

// Q3_K's 6-bit scale of group g (0..15), offset by 32.
int q3_k_scale(const uint8_t* s, int g) {
    const int low = g < 8 ? (s[g] & 0x0f) : (s[g - 8] >> 4);
    return low | (((s[8 + g % 4] >> (2 * (g / 4))) & 3) << 4);
}

}  // namespace

// The K-quants against q8 activations (blocks of 32, corr =
// sum): integer dot products per group of weights sharing a scale, scaled in
// float.
//   Q4_K/Q5_K, group g of 32: dx_g * (d*sc_g * sum(q*xq) - dmin*m_g * sum(xq))
//   Q6_K, group of 16:        dx * d*sc * sum((q - 32) * xq)
//   Q3_K, group of 16:        dx * d*(s - 32) * sum(value * xq)
//   Q2_K, group of 16:        dx * (d*sc * sum(q*xq) - dmin*m * sum(xq))
void matmul_kq_scalar(TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy, int64_t n0,
                      int64_t n1) {
    const int64_t nsb = x.k() / kSuperBlock;
    const size_t rb = tensor_row_bytes(type, x.k());
    for (int64_t n = n0; n < n1; ++n) {
        const unsigned char* w = static_cast<const unsigned char*>(W) + static_cast<size_t>(n) * rb;
        for (int t = 0; t < x.rows(); ++t) {
            float acc = 0.0f;
            for (int64_t sb = 0; sb < nsb; ++sb) {
                if (type == TensorType::Q4_K || type == TensorType::Q5_K) {
                    // Q5_K is Q4_K with a fifth bit per code: group g's in bit g of qh[j].
                    const bool q5 = type == TensorType::Q5_K;
                    const BlockQ4_K* b4 = reinterpret_cast<const BlockQ4_K*>(w) + sb;
                    const BlockQ5_K* b5 = reinterpret_cast<const BlockQ5_K*>(w) + sb;
                    const uint16_t d16 = q5 ? b5->d : b4->d, dmin16 = q5 ? b5->dmin : b4->dmin;
                    const uint8_t* scales = q5 ? b5->scales : b4->scales;
                    const uint8_t* qs = q5 ? b5->qs : b4->qs;
                    const float d = fp16_to_fp32(d16), dmin = fp16_to_fp32(dmin16);
                    int sc[8], m[8];
                    q4_k_scales(scales, sc, m);
                    for (int g = 0; g < 8; ++g) {
                        const int8_t* xq = x.q8_block(8 * sb + g, t);
                        const QuantMeta& xm = *x.q8_meta(8 * sb + g, t);
                        const uint8_t* q = qs + 32 * (g / 2);
                        const int shift = 4 * (g % 2);
                        int32_t isum = 0;
                        for (int j = 0; j < 32; ++j) {
                            const int high = q5 ? ((b5->qh[j] >> g) & 1) << 4 : 0;
                            isum += (((q[j] >> shift) & 0x0f) | high) * xq[j];
                        }
                        acc += xm.d * (d * static_cast<float>(sc[g]) * static_cast<float>(isum) -
                                       dmin * static_cast<float>(m[g]) * static_cast<float>(xm.corr));
                    }
                } else if (type == TensorType::Q6_K) {
                    const BlockQ6_K& b = reinterpret_cast<const BlockQ6_K*>(w)[sb];
                    const float d = fp16_to_fp32(b.d);
                    for (int g = 0; g < 16; ++g) {
                        const int64_t blk = 8 * sb + g / 2;
                        const int8_t* xq = x.q8_block(blk, t) + 16 * (g % 2);
                        int32_t isum = 0;
                        for (int j = 0; j < 16; ++j) isum += (q6_k_code(b, 16 * g + j) - 32) * xq[j];
                        acc += x.q8_scale(blk, t) * (d * static_cast<float>(b.scales[g]) * static_cast<float>(isum));
                    }
                } else if (type == TensorType::Q2_K) {
                    // Groups of 16: x = d*(sc & 15) * q - dmin*(sc >> 4), q 2 bits as Q3_K's low bits.
                    const BlockQ2_K& b = reinterpret_cast<const BlockQ2_K*>(w)[sb];
                    const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
                    for (int g = 0; g < 16; ++g) {
                        const int64_t blk = 8 * sb + g / 2;
                        const int8_t* xq = x.q8_block(blk, t) + 16 * (g % 2);
                        int32_t isum = 0, asum = 0;
                        for (int j = 0; j < 16; ++j) {
                            const int e = 16 * g + j, h = e / 128, sh = 2 * ((e % 128) / 32), l = e % 32;
                            isum += ((b.qs[32 * h + l] >> sh) & 3) * xq[j];
                            asum += xq[j];
                        }
                        acc += x.q8_scale(blk, t) * (d * static_cast<float>(b.scales[g] & 0x0f) * static_cast<float>(isum) -
                                                     dmin * static_cast<float>(b.scales[g] >> 4) * static_cast<float>(asum));
                    }
                } else {
                    // Q3_K, groups of 16 as Q6_K's: x = d * (s - 32) * (q - 4 * (high bit clear)).
                    const BlockQ3_K& b = reinterpret_cast<const BlockQ3_K*>(w)[sb];
                    const float d = fp16_to_fp32(b.d);
                    for (int g = 0; g < 16; ++g) {
                        const int64_t blk = 8 * sb + g / 2;
                        const int8_t* xq = x.q8_block(blk, t) + 16 * (g % 2);
                        int32_t isum = 0;
                        for (int j = 0; j < 16; ++j) isum += q3_k_value(b, 16 * g + j) * xq[j];
                        acc += x.q8_scale(blk, t) * (d * static_cast<float>(q3_k_scale(b.scales, g) - 32) * static_cast<float>(isum));
                    }
                }
            }
            y[t * ldy + n] = acc;
        }
    }
}

// q5_0, q5_1, iq4_nl and iq4_xs against q8 activations (corr = sum): per
// block of 32, x_j = d * code_j + c with code = q, c = -16 d (q5_0); code =
// q, c = m (q5_1); code = value + 128, c = -128 d (iq4_nl; iq4_xs's groups
// of 32 with d = d_super * (ls - 32)), and
// dot = sum_b dx_b * (d_b * sum(code * xq) + c_b * sum(xq)).
void matmul_q32_scalar(TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy, int64_t n0,
                       int64_t n1) {
    const int64_t nb = x.k() / kQuantBlock;
    const size_t rb = tensor_row_bytes(type, x.k()), bb = type == TensorType::IQ4_XS ? 0 : tensor_type_block_bytes(type);
    for (int64_t n = n0; n < n1; ++n) {
        const unsigned char* w = static_cast<const unsigned char*>(W) + static_cast<size_t>(n) * rb;
        for (int t = 0; t < x.rows(); ++t) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                const unsigned char* p = w + static_cast<size_t>(b) * bb;
                int code[32];
                float d, c;
                if (type == TensorType::IQ4_NL || type == TensorType::IQ4_XS) {
                    // IQ4_XS: group b % 8 of super-block b / 8, an iq4_nl block
                    // whose scale is d * (ls - 32).
                    const uint8_t* qs;
                    if (type == TensorType::IQ4_NL) {
                        const BlockIQ4_NL& blk = *reinterpret_cast<const BlockIQ4_NL*>(p);
                        qs = blk.qs;
                        d = fp16_to_fp32(blk.d);
                    } else {
                        const BlockIQ4_XS& s = reinterpret_cast<const BlockIQ4_XS*>(w)[b / 8];
                        const int g = static_cast<int>(b % 8);
                        const int ls = ((s.scales_l[g / 2] >> (4 * (g % 2))) & 0x0f) | (((s.scales_h >> (2 * g)) & 3) << 4);
                        qs = s.qs + 16 * g;
                        d = fp16_to_fp32(s.d) * static_cast<float>(ls - 32);
                    }
                    for (int j = 0; j < 16; ++j) {
                        code[j] = kIq4NlValues[qs[j] & 0x0f] + 128;
                        code[j + 16] = kIq4NlValues[qs[j] >> 4] + 128;
                    }
                    c = -128.0f * d;
                } else {
                    // q5_0 and q5_1 share the qh/qs layout after their fp16 field(s).
                    const bool q5_1 = type == TensorType::Q5_1;
                    const uint8_t* qh = q5_1 ? reinterpret_cast<const BlockQ5_1*>(p)->qh : reinterpret_cast<const BlockQ5_0*>(p)->qh;
                    const uint8_t* qs = q5_1 ? reinterpret_cast<const BlockQ5_1*>(p)->qs : reinterpret_cast<const BlockQ5_0*>(p)->qs;
                    uint32_t h;
                    std::memcpy(&h, qh, 4);
                    for (int j = 0; j < 16; ++j) {
                        code[j] = (qs[j] & 0x0f) | static_cast<int>(((h >> j) & 1u) << 4);
                        code[j + 16] = (qs[j] >> 4) | static_cast<int>(((h >> (j + 16)) & 1u) << 4);
                    }
                    d = fp16_to_fp32(q5_1 ? reinterpret_cast<const BlockQ5_1*>(p)->d : reinterpret_cast<const BlockQ5_0*>(p)->d);
                    c = q5_1 ? fp16_to_fp32(reinterpret_cast<const BlockQ5_1*>(p)->m) : -16.0f * d;
                }
                const int8_t* xq = x.q8_block(b, t);
                int32_t isum = 0;
                for (int j = 0; j < 32; ++j) isum += code[j] * xq[j];
                const QuantMeta& xm = *x.q8_meta(b, t);
                acc += xm.d * (d * static_cast<float>(isum) + c * static_cast<float>(xm.corr));
            }
            y[t * ldy + n] = acc;
        }
    }
}

void matmul_dequant_scalar(TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy, int64_t n0,
                           int64_t n1) {
    const TensorTypeTraits& tt = *tensor_type_traits(static_cast<uint32_t>(type));
    const int64_t be = tt.block_elements, nb = x.k() / be;
    const size_t rb = tensor_row_bytes(type, x.k());
    float wb[kDequantMaxBlock];  // (be) one decoded block of the weight row
    for (int64_t n = n0; n < n1; ++n) {
        const unsigned char* w = static_cast<const unsigned char*>(W) + static_cast<size_t>(n) * rb;
        for (int t0 = 0; t0 < x.rows(); t0 += kDequantRowGroup) {
            const int tn = std::min(kDequantRowGroup, x.rows() - t0);
            float acc[kDequantRowGroup] = {};  // (tn) running dots of rows t0..t0+tn
            for (int64_t b = 0; b < nb; ++b) {
                tt.dequantize(w + static_cast<size_t>(b) * tt.block_bytes, wb, 1);
                for (int t = 0; t < tn; ++t) {
                    float s = 0.0f;
                    for (int64_t j = 0; j < be; ++j) {
                        const int64_t k = b * be + j;
                        s += wb[j] * x.f32_chunk(k / 16, t0 + t)[k % 16];
                    }
                    acc[t] += s;
                }
            }
            for (int t = 0; t < tn; ++t) y[(t0 + t) * ldy + n] = acc[t];
        }
    }
}

void matmul_scalar(TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy, int64_t n0,
                   int64_t n1) {
    const unsigned char* w = static_cast<const unsigned char*>(W);
    const size_t rb = tensor_row_bytes(type, x.k());
    switch (type) {
        case TensorType::F32: matmul_float_scalar<TensorType::F32>(w, rb, x, y, ldy, n0, n1); return;
        case TensorType::F16: matmul_float_scalar<TensorType::F16>(w, rb, x, y, ldy, n0, n1); return;
        case TensorType::BF16: matmul_float_scalar<TensorType::BF16>(w, rb, x, y, ldy, n0, n1); return;
        case TensorType::Q8_0: matmul_quant_scalar<TensorType::Q8_0>(w, rb, x, y, ldy, n0, n1); return;
        case TensorType::Q4_0: matmul_quant_scalar<TensorType::Q4_0>(w, rb, x, y, ldy, n0, n1); return;
        case TensorType::Q2_K:
        case TensorType::Q3_K:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K: matmul_kq_scalar(type, W, x, y, ldy, n0, n1); return;
        case TensorType::Q5_0:
        case TensorType::Q5_1:
        case TensorType::IQ4_NL:
        case TensorType::IQ4_XS: matmul_q32_scalar(type, W, x, y, ldy, n0, n1); return;
        default: matmul_dequant_scalar(type, W, x, y, ldy, n0, n1); return;
    }
}

}  // namespace kern

// --------------------------------------------------------------- dispatch ---

void matmul(Isa isa, TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy, int64_t n_begin,
            int64_t n_end) {
    if (!x.serves(type)) {
        throw Error(std::string("matmul: input prepared for ") + tensor_type_name(x.weight_type()) + " weights, called with " +
                    tensor_type_name(type));
    }
    if (n_begin < 0 || n_end < n_begin) throw Error("matmul: bad output range");
    if (!isa_supported(isa)) throw Error(std::string("matmul: ISA ") + isa_name(isa) + " is not supported by this CPU");
    if (n_begin == n_end || x.rows() == 0) return;
    if (x.k() == 0) {
        for (int t = 0; t < x.rows(); ++t) std::fill(y + t * ldy + n_begin, y + t * ldy + n_end, 0.0f);
        return;
    }
    switch (isa) {
        case Isa::Avx512: kern::matmul_avx512(type, W, x, y, ldy, n_begin, n_end); return;
        case Isa::Avx2: kern::matmul_avx2(type, W, x, y, ldy, n_begin, n_end); return;
        case Isa::Scalar: kern::matmul_scalar(type, W, x, y, ldy, n_begin, n_end); return;
    }
}

int packed_tile_rows(Isa isa) {
    switch (isa) {
        case Isa::Avx512: return 16;
        case Isa::Avx2: return 8;
        case Isa::Scalar: break;
    }
    return 0;
}

namespace {

// The packed layout of a type: its block (bytes, elements) and the fp16
// kept apart in the tail (offset in the block), if any.
struct PackedBlock {
    size_t bytes = 0;
    int64_t elems = 0;
    size_t tail_at = SIZE_MAX;  // SIZE_MAX: every byte goes to the chunks
};

bool k_quant(TensorType type) {
    return type == TensorType::Q2_K || type == TensorType::Q3_K || type == TensorType::Q4_K || type == TensorType::Q5_K ||
           type == TensorType::Q6_K;
}

PackedBlock packed_block(TensorType type) {
    PackedBlock p{tensor_type_block_bytes(type), tensor_type_block_elements(type), SIZE_MAX};
    if (type == TensorType::Q8_0 || type == TensorType::Q4_0) p.tail_at = 0;  // the scale d
    if (type == TensorType::Q6_K) p.tail_at = offsetof(BlockQ6_K, d);
    if (type == TensorType::Q3_K) p.tail_at = offsetof(BlockQ3_K, d);
    return p;
}

}  // namespace

bool packable(Isa isa, TensorType type, int64_t rows, int64_t cols) {
    const int R = packed_tile_rows(isa);
    const bool q32 = type == TensorType::Q8_0 || type == TensorType::Q4_0;
    if (R == 0 || !(q32 || (isa == Isa::Avx512 && k_quant(type)))) return false;
    return rows > 0 && rows % R == 0 && cols > 0 && cols % tensor_type_block_elements(type) == 0;
}

void pack_weights(Isa isa, TensorType type, const void* src, int64_t rows, int64_t cols, void* dst) {
    if (!packable(isa, type, rows, cols)) {
        throw Error(std::string("pack_weights: cannot pack ") + tensor_type_name(type) + " " + std::to_string(rows) + "x" +
                    std::to_string(cols) + " for " + isa_name(isa));
    }
    const size_t R = static_cast<size_t>(packed_tile_rows(isa));
    const PackedBlock pb = packed_block(type);
    const size_t bb = pb.bytes, tail = pb.tail_at == SIZE_MAX ? 0 : 2;
    const int64_t nb = cols / pb.elems;
    const size_t rb = static_cast<size_t>(nb) * bb;
    // AVX-512 reads q8_0 codes as unsigned bytes (w + 128); nothing else changes.
    const unsigned char flip = type == TensorType::Q8_0 && isa == Isa::Avx512 ? 0x80 : 0x00;
    std::vector<unsigned char> rest(bb - tail);  // one row's block without the tail
    for (int64_t t = 0; t < rows / static_cast<int64_t>(R); ++t) {
        const auto* s = static_cast<const unsigned char*>(src) + static_cast<size_t>(t) * R * rb;  // (R, rb)
        auto* d = static_cast<unsigned char*>(dst) + static_cast<size_t>(t) * R * rb;
        for (int64_t b = 0; b < nb; ++b) {
            const kern::PackedBlockOffsets at = kern::packed_block_offsets(b, nb, R, bb, tail);
            unsigned char* c = d + at.chunks;
            unsigned char* tl = d + at.fp16;
            for (size_t i = 0; i < R; ++i) {
                const unsigned char* blk = s + i * rb + static_cast<size_t>(b) * bb;
                if (tail != 0) {
                    std::memcpy(tl + 2 * i, blk + pb.tail_at, 2);
                    std::memcpy(rest.data(), blk, pb.tail_at);
                    std::memcpy(rest.data() + pb.tail_at, blk + pb.tail_at + 2, bb - pb.tail_at - 2);
                } else {
                    std::memcpy(rest.data(), blk, bb);
                }
                for (size_t q = 0; q < rest.size() / 4; ++q) {  // q8_0: every byte but the (tail) scale is a code
                    for (size_t j = 0; j < 4; ++j) c[q * 4 * R + 4 * i + j] = rest[4 * q + j] ^ flip;
                }
            }
        }
    }
}

void matmul_packed(Isa isa, TensorType type, const void* W_packed, const PreparedInput& x, float* y, int64_t ldy,
                   int64_t n_begin, int64_t n_end) {
    const int R = packed_tile_rows(isa);
    if (R == 0 || !isa_supported(isa)) throw Error(std::string("matmul_packed: no packed layout for ") + isa_name(isa) + " here");
    if (type != TensorType::Q8_0 && type != TensorType::Q4_0 && !(isa == Isa::Avx512 && k_quant(type))) {
        throw Error(std::string("matmul_packed: no packed ") + tensor_type_name(type) + " kernel for " + isa_name(isa));
    }
    if (!x.serves(type)) {
        throw Error(std::string("matmul_packed: input prepared for ") + tensor_type_name(x.weight_type()) +
                    " weights, called with " + tensor_type_name(type));
    }
    if (n_begin < 0 || n_end < n_begin || n_begin % R != 0 || n_end % R != 0) {
        throw Error("matmul_packed: output range not whole tiles of " + std::to_string(R) + " rows");
    }
    if (n_begin == n_end || x.rows() == 0) return;
    if (isa == Isa::Avx512) kern::matmul_packed_avx512(type, W_packed, x, y, ldy, n_begin, n_end);
    else kern::matmul_packed_avx2(type, W_packed, x, y, ldy, n_begin, n_end);
}

float dot_f32(Isa isa, const float* a, const float* b, int64_t n) {
    switch (isa) {
        case Isa::Avx512: return kern::dot_f32_avx512(a, b, n);
        case Isa::Avx2: return kern::dot_f32_avx2(a, b, n);
        case Isa::Scalar: break;
    }
    float acc = 0.0f;
    for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
    return acc;
}

void axpy_f32(Isa isa, float alpha, const float* x, float* y, int64_t n) {
    switch (isa) {
        case Isa::Avx512: kern::axpy_f32_avx512(alpha, x, y, n); return;
        case Isa::Avx2: kern::axpy_f32_avx2(alpha, x, y, n); return;
        case Isa::Scalar: break;
    }
    for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

namespace {

// One stored key/value element (F32 or F16) as f32.
float kv_element(TensorType kv_type, const void* row, int64_t i) {
    return kv_type == TensorType::F16 ? fp16_to_fp32(static_cast<const uint16_t*>(row)[i]) : static_cast<const float*>(row)[i];
}

void check_kv_type(TensorType kv_type) {
    if (kv_type != TensorType::F32 && kv_type != TensorType::F16) {
        throw Error(std::string("attention kernels: keys and values must be f32 or f16, not ") + tensor_type_name(kv_type));
    }
}

}  // namespace

void dot_rows(Isa isa, TensorType kv_type, const float* q, const void* k, int64_t ldk, int32_t rows, int64_t n, float scale,
              float* out) {
    check_kv_type(kv_type);
    switch (isa) {
        case Isa::Avx512: kern::dot_rows_avx512(kv_type, q, k, ldk, rows, n, scale, out); return;
        case Isa::Avx2: kern::dot_rows_avx2(kv_type, q, k, ldk, rows, n, scale, out); return;
        case Isa::Scalar: break;
    }
    const auto* kb = static_cast<const unsigned char*>(k);
    const size_t row_bytes = static_cast<size_t>(ldk) * tensor_type_block_bytes(kv_type);
    for (int32_t j = 0; j < rows; ++j) {
        const void* row = kb + j * row_bytes;
        float sum = 0.0f;  // dot_f32's scalar order
        for (int64_t i = 0; i < n; ++i) sum += q[i] * kv_element(kv_type, row, i);
        out[j] = sum * scale;
    }
}

void dot_rows_f32(Isa isa, const float* q, const float* k, int64_t ldk, int32_t rows, int64_t n, float scale, float* out) {
    dot_rows(isa, TensorType::F32, q, k, ldk, rows, n, scale, out);
}

float exp_shift_sum_f32(Isa isa, float* x, int64_t n, float shift) {
    switch (isa) {
        case Isa::Avx512: return kern::exp_shift_sum_f32_avx512(x, n, shift);
        case Isa::Avx2: return kern::exp_shift_sum_f32_avx2(x, n, shift);
        case Isa::Scalar: break;
    }
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - shift);
        sum += x[i];
    }
    return sum;
}

void weighted_rows(Isa isa, TensorType kv_type, const float* w, float w_scale, const void* v, int64_t ldv, int32_t rows,
                   int64_t n, float* y) {
    check_kv_type(kv_type);
    switch (isa) {
        case Isa::Avx512: kern::weighted_rows_avx512(kv_type, w, w_scale, v, ldv, rows, n, y); return;
        case Isa::Avx2: kern::weighted_rows_avx2(kv_type, w, w_scale, v, ldv, rows, n, y); return;
        case Isa::Scalar: break;
    }
    const auto* vb = static_cast<const unsigned char*>(v);
    const size_t row_bytes = static_cast<size_t>(ldv) * tensor_type_block_bytes(kv_type);
    for (int32_t j = 0; j < rows; ++j) {
        const float a = w[j] * w_scale;
        const void* row = vb + j * row_bytes;
        for (int64_t i = 0; i < n; ++i) y[i] += a * kv_element(kv_type, row, i);  // axpy_f32's scalar order
    }
}

void weighted_rows_f32(Isa isa, const float* w, float w_scale, const float* v, int64_t ldv, int32_t rows, int64_t n, float* y) {
    weighted_rows(isa, TensorType::F32, w, w_scale, v, ldv, rows, n, y);
}

void store_kv_row(Isa isa, TensorType kv_type, const float* src, void* dst, int64_t n) {
    check_kv_type(kv_type);
    if (kv_type == TensorType::F32) {
        std::copy(src, src + n, static_cast<float*>(dst));
        return;
    }
    uint16_t* h = static_cast<uint16_t*>(dst);
    switch (isa) {
        case Isa::Avx512: kern::store_row_f16_avx512(src, h, n); return;
        case Isa::Avx2: kern::store_row_f16_avx2(src, h, n); return;
        case Isa::Scalar: break;
    }
    for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
}

void silu_mul_f32(Isa isa, float* g, const float* u, int64_t n) {
    switch (isa) {
        case Isa::Avx512: kern::silu_mul_f32_avx512(g, u, n); return;
        case Isa::Avx2: kern::silu_mul_f32_avx2(g, u, n); return;
        case Isa::Scalar: break;
    }
    for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void dequantize_row_isa(Isa isa, TensorType type, const void* src, float* dst, int64_t n) {
    switch (isa) {
        case Isa::Avx512: kern::dequantize_row_avx512(type, src, dst, n); return;
        case Isa::Avx2: kern::dequantize_row_avx2(type, src, dst, n); return;
        case Isa::Scalar: break;
    }
    dequantize_row(type, src, dst, n);
}

}  // namespace specd
