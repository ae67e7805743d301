"""The KV cache (`kernel`): the cache write, and the rotary embedding that writes the rotated key
and the value into the cache."""
