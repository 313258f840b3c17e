// Linked into the gate's driver only: fma() and fmaf() as a multiply and an add.
//
// The gate's build has no FMA instructions (see no_fma.h), so std::fma in the kernels becomes a
// call into libm, whose exact software fma costs ~60 instructions a call and would dominate the
// counts of the attention kernel (in the shipped build the same loop is a few vectorised vfmadd).
// Defining the symbols in the executable takes precedence over libm's for the statically linked
// core. The results differ from a fused multiply-add in the last bit, which the gate does not look
// at: it counts work.
extern "C" {
float fmaf(float a, float b, float c) { return a * b + c; }
double fma(double a, double b, double c) { return a * b + c; }
}
