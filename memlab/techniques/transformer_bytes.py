def attention_bytes(c, es, kind): return 0
def loss_bytes(c, es, kind, chunk=None): return 0
