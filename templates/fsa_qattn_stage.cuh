// A stage of the Hopper warpgroup query-tile forwards (fsa_qattn_wg.cuh,
// fsa_qattn_ws.cuh; sm_90a), shared by the variants whose products wait
// before the step that follows.
#pragma once
#include "fsa_qattn.cuh"
#include "fsa_wgmma.cuh"

namespace fsa {

// A stage's issued scores s waited for, its online-softmax step from key
// j0, the accumulator rescaled and O += P V from the V stage at v_tile,
// waited for: a stage whose products each wait before the step that follows
// (variants 1, 4 and 5 of fsa_qattn_wg.cuh, 6 of fsa_qattn_ws.cuh).
template <class DT, int KS, int DV, class Visible>
__device__ __forceinline__ void stage_softmax_pv(OnlineSoftmax &sm, float (&s)[KS / 8][4], float (&acc)[DV / 8][4],
                                                 u32 (&pa)[KS / 16][4], float (&alpha)[2], float scale_log2, int lane,
                                                 int j0, Visible visible, u32 v_tile) {
    wg_wait<0>();
    wg_hold<KS / 8>(s);
    softmax_stage<KS>(sm, s, scale_log2, lane, j0, visible, alpha);
    rescale_rows<DV / 8>(acc, alpha);
    wg_pv_waited<DT, KS / 16, DV>(acc, pa, s, v_tile);
}

}  // namespace fsa
