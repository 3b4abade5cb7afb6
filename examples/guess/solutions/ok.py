# Accepted, in Python 3: binary search.
n = int(input())
lo, hi = 1, n
while lo <= hi:
    mid = (lo + hi) // 2
    print(mid, flush=True)
    reply = input().strip()
    if reply == "=":
        break
    if reply == "<":
        hi = mid - 1
    else:
        lo = mid + 1
