# Re-aggregates round 1 raw runs (kernels_run{0,1,2}.json of rowfast.tgz) pairing each kernel with the copy of its own bytes.
import json, sys, pandas as pd
rows=[]
for i in range(3):
    for r in json.load(open(f"kernels_run{i}.json")):
        r["run"]=i; rows.append(r)
df=pd.DataFrame(rows)
df=df[df["bytes"].notna()].copy()
df["group"]=df["shape"]+df.kind.map(lambda k: " [reduction]" if k in ("row_sum","row_max") else "")
shared={"4096x4096 float16","256x65536 float32"}
def cgroup(r):
    if r["shape"] in shared:
        a,b=r["shape"].split()[0].split("x")
        big=2*int(a)*int(b)*(2 if "16" in r["shape"] else 4)
        return r["shape"] if r["bytes"]==big else r["shape"]+" [reduction]"
    if r["shape"]=="65536x256 float16": return r["shape"]+" [reduction]"
    return r["shape"]
iscp=df.kind=="copy"
df.loc[iscp,"group"]=df[iscp].apply(cgroup,axis=1)
df["gbps"]=df.bytes/df.seconds/1e9
c=df[iscp][["run","group","gbps"]].rename(columns={"gbps":"cgb"})
t=df[df.variant=="torch eager"][["run","group","kind","seconds"]].rename(columns={"seconds":"ts"})
m=df[~iscp].merge(c,on=["run","group"]).merge(t,on=["run","group","kind"],how="left")
m["of_copy"]=m.gbps/m.cgb; m["vs"]=m.ts/m.seconds
g=m.groupby(["group","kind","variant"],sort=False).agg(gb0=("gbps","min"),gb1=("gbps","max"),c0=("of_copy","min"),c1=("of_copy","max"),v0=("vs","min"),v1=("vs","max"),us0=("seconds","min"),us1=("seconds","max"),ok=("ok","all")).reset_index()
cg=df[iscp].groupby("group").agg(a=("gbps","min"),b=("gbps","max"))
print("| shape | op | implementation | GB/s | of copy (same process) | vs torch eager | µs | correct |\n|---|---|---|---|---|---|---|---|")
for grp in dict.fromkeys(g.group):
    a,b=cg.loc[grp]
    print(f"| {grp} | copy | torch copy_ | {a:.0f}–{b:.0f} | 100% | — | — | yes |")
    for r in g[g.group==grp].itertuples():
        if pd.isna(r.gb0): print(f"| {grp} | {r.kind} | {r.variant} | n/a | | | | {'yes' if r.ok else 'NO'} |"); continue
        vs = f"{r.v0:.2f}–{r.v1:.2f}x" if r.variant.startswith("hookmagic") and not pd.isna(r.v0) else "—"
        print(f"| {grp} | {r.kind} | {r.variant} | {r.gb0:.0f}–{r.gb1:.0f} | {r.c0:.0%}–{r.c1:.0%} | {vs} | {r.us0*1e6:.1f}–{r.us1*1e6:.1f} | {'yes' if r.ok else 'NO'} |")
