"""Whether two builds (or two FSA_WGMMA variants) of libfsa write the same forward outputs, bit for bit
(digests of o and lse; the first 512 tokens kept to measure a difference): the compressed forward (bf16,
Hq 32, D 128, kernel 32, stride 16, no selection) at G 1, 4, 16 and the window forward (W 512, G 4), on one
long sequence and on a varlen batch, plus the paper's head dims (Hq 64, Dk 192, Dv 128, G 16). Each forward runs twice in the process: the two must be equal too (run-to-run
determinism). The inputs are seeded on the GPU, so two processes see the same ones.

    FSA_WGMMA=5 FSA_LIBRARY=build-a/libfsa.so python3 bench/fwd_same.py save a.pt [-T 65536]
    FSA_WGMMA=6 FSA_LIBRARY=build-b/libfsa.so python3 bench/fwd_same.py save b.pt [-T 65536]
    python3 bench/fwd_same.py compare a.pt b.pt [c.pt ...]   # a against each of the others
"""
import argparse
import hashlib
import sys
from pathlib import Path

import torch

from bits import same_bits  # bench/bits.py, beside this script

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))


def cases(T):
    # (name, kind, Hq, G, Dk, Dv, cu_seqlens): one sequence of T // 4 tokens at each G (T // 4 = 16384: 16
    # stages of 64 compressed keys), one of T at G 4, a varlen batch, the paper's head dims.
    t = T // 4
    varlen = [0, 1000, 1001, 1064, 5000, 5193, t]
    out = []
    for g in (1, 4, 16):
        out.append((f"cmp_g{g}_T{t}", "cmp", 32, g, 128, 128, [0, t]))
    out.append((f"cmp_g4_T{T}", "cmp", 32, 4, 128, 128, [0, T]))
    out.append(("cmp_g4_varlen", "cmp", 32, 4, 128, 128, varlen))
    out.append(("cmp_paper_g16", "cmp", 64, 16, 192, 128, [0, T // 8]))
    out.append((f"swa_g4_T{t}", "swa", 32, 4, 128, 128, [0, t]))
    out.append(("swa_g4_varlen", "swa", 32, 4, 128, 128, varlen))
    out.append(("swa_paper_g16", "swa", 64, 16, 192, 128, [0, T // 8]))
    return out


def digest(x):
    return hashlib.sha256(x.contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()


def save(path, T, only):
    import fsa_jit
    from fsa_jit.nsa import compressed_cu_seqlens

    out = {}
    for i, (name, kind, hq, g, dk, dv, cu_list) in enumerate(cases(T)):
        if only and not any(o in name for o in only):
            continue
        cu = torch.tensor(cu_list, dtype=torch.int32, device="cuda")
        t = cu_list[-1]
        gen = torch.Generator(device="cuda").manual_seed(2000 + i)
        q = torch.randn(t, hq, dk, generator=gen, device="cuda", dtype=torch.bfloat16)
        if kind == "cmp":
            cu_c = compressed_cu_seqlens(cu, 32, 16)
            tk = int(cu_c[-1])
        else:
            tk = t
        k = torch.randn(tk, hq // g, dk, generator=gen, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(tk, hq // g, dv, generator=gen, device="cuda", dtype=torch.bfloat16)
        runs = []
        with torch.no_grad():
            for _ in range(2):
                if kind == "cmp":
                    o, lse = fsa_jit.compressed_attention(q, k, v, cu, cu_c, 32, 16)[:2]
                else:
                    o, lse = fsa_jit.window_attention(q, k, v, cu, 512, return_lse=True)
                runs.append((o.clone(), lse.clone()))
        torch.cuda.synchronize()
        same = same_bits(runs[0][0], runs[1][0]) and same_bits(runs[0][1], runs[1][1])
        o, lse = runs[0]
        print(f"{name}: T {t}, o finite {bool(torch.isfinite(o).all())}, run to run {'same' if same else 'DIFFERENT'}")
        # Digests of the whole outputs, and the first 512 tokens' o and lse to measure differences.
        out[name] = (digest(o), digest(lse), o[:512].cpu(), lse[:, :512].cpu(), same)
    torch.save(out, path)


def compare(a_path, b_path):
    print(f"== {a_path} against {b_path}")
    a, b = torch.load(a_path), torch.load(b_path)
    bad = 0
    for name in a:
        if name not in b:
            print(f"{name}: missing in {b_path}")
            bad += 1
            continue
        (doa, dla, oa, la, sa), (dob, dlb, ob, lb, sb) = a[name], b[name]
        same_o, same_l = doa == dob, dla == dlb
        diff_o = int((oa.view(torch.int16) != ob.view(torch.int16)).sum())
        err_o = float((oa.float() - ob.float()).abs().max())
        fin = torch.isfinite(la) & torch.isfinite(lb)
        err_l = float((la[fin] - lb[fin]).abs().max()) if bool(fin.any()) else 0.0
        print(f"{name}: o {'same' if same_o else 'DIFFERENT'}, lse {'same' if same_l else 'DIFFERENT'} "
              f"(first 512 tokens: {diff_o} o elements differ, max abs {err_o:.3e}, lse max abs {err_l:.3e}, "
              f"-inf where the other is not {int((torch.isinf(la) != torch.isinf(lb)).sum())}); "
              f"run to run a {'same' if sa else 'DIFFERENT'}, b {'same' if sb else 'DIFFERENT'}")
        bad += (not same_o) + (not same_l) + (not sa) + (not sb)
    print("same" if bad == 0 else "DIFFERENT")
    return 0 if bad == 0 else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["save", "compare"])
    ap.add_argument("files", nargs="+")
    ap.add_argument("-T", type=int, default=65536)
    ap.add_argument("--only", default="", help="comma-separated substrings of case names")
    o = ap.parse_args()
    if o.mode == "save":
        save(o.files[0], o.T, [x for x in o.only.split(",") if x])
        return 0
    return max(compare(o.files[0], other) for other in o.files[1:])  # the first against each other


if __name__ == "__main__":
    sys.exit(main())
