# Accepted, in Python 3.
a, b = map(int, input().split())
print(a + b)
