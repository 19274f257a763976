import socket, threading, time, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 18911)); srv.listen(8)
def handle(c):
    c.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        d = c.recv(65536)
        if not d: return
        data += d
    c.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
    t0 = time.time()
    for i in range(int(sys.argv[1]) if len(sys.argv)>1 else 20):
        ev = f"data: event {i}\n\n".encode()
        try:
            c.sendall(b"%x\r\n%s\r\n" % (len(ev), ev))
        except OSError as e:
            print(f"upstream: write failed after {i} events, {time.time()-t0:.2f}s: {e!r}", flush=True); return
        time.sleep(0.3)
    c.sendall(b"0\r\n\r\n"); print(f"upstream: sent all 20 events, {time.time()-t0:.2f}s", flush=True)
    c.close()
while True:
    c, _ = srv.accept(); threading.Thread(target=handle, args=(c,), daemon=True).start()
