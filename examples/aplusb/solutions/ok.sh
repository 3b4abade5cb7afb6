# Accepted, in bash (64-bit arithmetic).
read -r a b
echo $((a + b))
