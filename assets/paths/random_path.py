"""A camera path nobody tuned to, from a seed: the demo's --camera-path format on stdout.

    python3 assets/paths/random_path.py SEED [FRAMES] > path.jsonl

Segments of 12-36 frames drawn at random: walks between random points (eye 0.5-4 units
high, which may pass through objects), swings of 2-4 frames onto another object,
teleports, straight flights through an object, and zooms of the field of view (20-70
degrees). The gallery's 16 objects stand on a 4 x 4 grid, 3.2 units apart. Seeds 11 and
12 are the ones docs/experiments/camera-paths.md used; pick others to judge a change on
paths it was not made for.
"""
import json, math, random, sys
seed=int(sys.argv[1]); frames=int(sys.argv[2]) if len(sys.argv)>2 else 240
R=random.Random(seed)
objs=[(x,1.0,z) for z in (-4.8,-1.6,1.6,4.8) for x in (-4.8,-1.6,1.6,4.8)]
def lerp(a,b,t): return [a[i]+(b[i]-a[i])*t for i in range(3)]
def rand_eye():
    while True:
        e=[R.uniform(-9,9), R.uniform(0.5,4.0), R.uniform(-9,9)]
        if all(math.dist(e,o)>1.4 for o in objs): return e
out=[]; eye=rand_eye(); tgt=list(R.choice(objs)); fov=50.0
while len(out)<frames:
    kind=R.choice(['walk','walk','swing','teleport','through','zoom'])
    n=R.randint(12,36)
    if kind=='teleport':
        eye=rand_eye(); tgt=list(R.choice(objs)); n=R.randint(10,30)
        for _ in range(n): out.append((eye[:],tgt[:],fov))
    elif kind=='swing':
        new=list(R.choice(objs)); k=R.randint(2,4)
        for i in range(1,k+1): out.append((eye[:],lerp(tgt,new,i/k),fov))
        tgt=new
        for _ in range(n): out.append((eye[:],tgt[:],fov))
    elif kind=='through':
        o=R.choice(objs); a=[o[0]+R.uniform(-4,4),R.uniform(0.6,1.4),o[2]+R.uniform(-4,4)]
        b=[2*o[0]-a[0],a[1],2*o[2]-a[2]]
        for i in range(n):
            e=lerp(a,b,i/(n-1)); d=[b[j]-a[j] for j in range(3)]
            out.append((e,[e[j]+d[j] for j in range(3)],fov))
        eye=b; tgt=[b[j]+d[j] for j in range(3)]
    elif kind=='zoom':
        f2=R.uniform(20,70)
        for i in range(n): out.append((eye[:],tgt[:],fov+(f2-fov)*i/(n-1)))
        fov=f2
    else:
        dest=rand_eye(); look=list(R.choice(objs))
        for i in range(n):
            t=(i+1)/n; out.append((lerp(eye,dest,t), lerp(tgt,look,min(1,t*2)), fov))
        eye=dest; tgt=look
for i,(e,t,f) in enumerate(out[:frames]):
    if math.dist(e,t)<1e-3: t=[t[0],t[1],t[2]-1]
    print(json.dumps({"frame":i,"eye":[round(v,4) for v in e],"target":[round(v,4) for v in t],"fov_y_deg":round(f,3)}))
