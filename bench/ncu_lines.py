"""Aggregates an ncu source page (--page source --csv --print-source sass) by CUDA source line, matching its
SASS one to one against a local `nvdisasm -g` listing of the same kernel (ptxas of the dumped PTX):
    python3 bench/ncu_lines.py src.csv kernel.sass [N]
prints the N source lines with the most stall samples, their share of executed instructions and top stalls."""
import csv,re,collections,sys
csvf,sassf=sys.argv[1],sys.argv[2]
rows=list(csv.reader(open(csvf)))
hdr=rows[1]; data=rows[2:]
H={h:i for i,h in enumerate(hdr)}
lines=open(sassf).read().split('\n')
loc=[];cur=None
for l in lines:
    m=re.search(r'File "([^"]+)", line (\d+)',l)
    if m: cur=m.group(1).split('/')[-1]+':'+m.group(2); continue
    m=re.search(r'/\*([0-9a-f]{4})\*/\s+(.*?)\s*;',l)
    if m: loc.append((cur,m.group(2)))
assert len(loc)==len(data)
ex=collections.Counter(); st=collections.Counter(); stall_kinds=collections.defaultdict(collections.Counter)
skinds=[h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
tot_ex=0; tot_st=0
for (src,ins),r in zip(loc,data):
    e=int(r[H['Instructions Executed']] or 0); s=int(r[H['Warp Stall Sampling (All Samples)']] or 0)
    ex[src]+=e; st[src]+=s; tot_ex+=e; tot_st+=s
    for k in skinds:
        v=int(r[H[k]] or 0)
        if v: stall_kinds[src][k]+=v
print('total executed %d, samples %d'%(tot_ex,tot_st))
for src,s in st.most_common(int(sys.argv[3]) if len(sys.argv)>3 else 40):
    top=', '.join('%s %d'%(k[6:],v) for k,v in stall_kinds[src].most_common(3))
    print('%6.2f%% samples %6.2f%% instr  %-28s %s'%(100*s/tot_st,100*ex[src]/tot_ex,src,top))
