# TLS on a board, the parts only a board with TLS loads (RAM): the start-up
# check that its TLS connections fit (firmware/startup.py build, tls_room), an
# accepted socket wrapped for the listener (wrap_accepted), a handshake that
# failed (handshake_failed, tls_failure: firmware/shell.py, slot.py), and a bridge's
# client context and failure reasons (firmware/bridge.py; the listener's
# server context is firmware/boardcfg.py load_tls).

import gc

from common.broker.limits import ConfigError

# mbedTLS error codes (negative) and errnos -> why a handshake failed.
_NOT_TLS = (-0x7200, -0x6E80, -0x7300, -0x7700)  # invalid record, bad version, decode error, unexpected message
PEER_ENDED = (-0x7780, -0x7280, 32, 104)  # fatal alert, EOF; EPIPE, ECONNRESET (answering a gone client)
_CERT_REFUSED = (-0x2700, -0x7A00, -0x6C00, -0x7480)  # X509 verify failed, bad cert, handshake failure, none


def wrap_accepted(server, slot, sock, cid, peer):
    """The socket accepted into `slot` as connection `cid`, wrapped for the
    listener's TLS (the handshake runs inside the reads: firmware/shell.py);
    None if mbedTLS could not allocate its context: closed, counted, logged."""
    try:
        tls = server.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
    except (OSError, MemoryError, ValueError) as e:
        sock.close()
        server.free.append(slot)
        server.driver.connection_lost(cid)
        server.driver.tls_failed()
        server.log.log(30, "TLS connection from %s refused: %s" % (peer[0], tls_failure(e, 0)))
        return None
    slot.raw = sock
    slot.handshaking = True
    slot.peer = peer[0]
    return tls


def handshake_failed(server, slot):
    """`slot`'s connection closed before any byte came through TLS (its
    error, or the core's connect timeout: a stalled handshake): counted and
    logged with the reason (Slot.finish)."""
    driver = server.driver
    driver.tls_failed()
    timeout = driver.broker.settings.connect_timeout
    server.log.log(30, "TLS handshake from %s failed: %s; closed" % (slot.peer, tls_failure(slot.error, timeout)))


def tls_failure(error, timeout):
    """Why a TLS handshake ended, in words for the log."""
    if error is None:
        return "not completed within connect_timeout (%d s)" % timeout
    code = error.args[0] if error.args and isinstance(error.args[0], int) else 0
    name = " (%s)" % error.args[1] if len(error.args) > 1 else " (%d)" % code
    if code in _NOT_TLS:
        return "the client does not speak TLS (plain MQTT to the TLS port?)" + name
    if code in PEER_ENDED:
        return "the client ended the handshake (an alert, or closed); check that it trusts the certificate" + name
    if code in _CERT_REFUSED:
        return "the client certificate was refused or missing (require_certificate)" + name
    if code == 12 or code == -0x7F00:  # ENOMEM, SSL_ALLOC_FAILED
        return "no memory for its TLS buffers" + name
    return "TLS error" + name


# Heap one TLS client takes at its handshake's peak, measured on the unix
# port by tools/tls_ram.py (docs/boards.md, "TLS"): mbedTLS's record
# buffers (16 KB in, 4 KB out) and session, 23,010 B; its handshake, 1,618 B
# more while it runs; the SSLSocket in the MicroPython heap, 536 B. A
# bridge's TLS upstream session (docs/bridge.md, "On the boards"): the same
# 23,036 B once connected, but 4,404 B more during its handshake (the client
# parses and verifies the upstream's certificate): 28 KB at the peak. With
# TLS bridges every TLS connection is counted at that figure.
TLS_CLIENT_BYTES = 25 * 1024
TLS_UPSTREAM_BYTES = 28 * 1024
TLS_BIGGEST_BLOCK = 16 * 1024 + 400  # the input record buffer (MBEDTLS_SSL_IN_CONTENT_LEN + its header)


def check_tls_room(max_connections, slots, upstreams, log):
    """Refuse TLS at start-up on a board that cannot hold its TLS bridges
    (`upstreams`, one session each) and one TLS client (`slots`: the
    listener's, 0 without TLS there); say how many it holds (per board,
    measured now, among the pools)."""
    per = TLS_UPSTREAM_BYTES if upstreams else TLS_CLIENT_BYTES
    room, heap = tls_room(per, TLS_BIGGEST_BLOCK, slots + upstreams)
    free = gc.mem_free() // 1024
    if room < upstreams:
        raise ConfigError(
            "bridge: a TLS upstream session needs about %d KB (mbedTLS buffers and handshake; one block of %d KB) of"
            " the %s, which has %d KB free after start-up: room for %d of the %d TLS bridge(s). Freeze the code into"
            " the firmware or lower the limits (docs/boards.md), or bridge over plain TCP (no tls, cafile, certfile)"
            % (per // 1024, TLS_BIGGEST_BLOCK // 1024, heap, free, room, upstreams)
        )
    if upstreams:
        log.log(20, "TLS: %d bridge upstream(s), about %d KB each of the %s" % (upstreams, per // 1024, heap))
        room -= upstreams
    if not slots:
        return
    if room < 1:
        raise ConfigError(
            "certfile: a TLS client needs about %d KB (mbedTLS buffers and handshake; one block of %d KB) of the %s,"
            " which has %d KB free after start-up%s: not even one fits. Freeze the code into the firmware or lower the"
            " limits (docs/boards.md), or serve plain MQTT (no certfile)"
            % (per // 1024, TLS_BIGGEST_BLOCK // 1024, heap, free, " and the TLS bridges' room" if upstreams else "")
        )
    log.log(
        20 if room >= slots else 30,
        "TLS: about %d KB per client of the %s: room for %s TLS connection(s) (%d sockets: %d clients + refusals)"
        % (per // 1024, heap, room if room < slots else "all %d" % room, slots, max_connections),
    )


def tls_room(per_client, biggest, most):
    """(TLS clients whose mbedTLS buffers fit now, at most `most`; the heap's name).

    On the ESP32 MicroPython uses ESP-IDF's mbedTLS, which allocates from
    the IDF heap (the one the split MicroPython heap also grows into): the
    free bytes of its regions are divided. On the Pico W (and every port with
    MICROPY_MBEDTLS_CONFIG_BARE_METAL) mbedTLS allocates from the MicroPython
    heap (m_tracked_calloc), where what counts is whether its blocks (the
    largest `biggest` bytes: the 16 KB input buffer) find room among the
    pools: tried with real allocations, freed at once. The unix port's
    mbedTLS uses malloc; its capped MicroPython heap stands in for a Pico W's.
    """
    gc.collect()
    try:
        import esp32

        room = 0
        for _total, free, largest, _low in esp32.idf_heap_info(esp32.HEAP_DATA):
            if largest >= biggest:  # a region without a block for the input buffer holds none
                room += free // per_client
        return min(room, most), "ESP-IDF heap"
    except (ImportError, AttributeError):
        pass
    blocks = []
    try:
        while len(blocks) < 2 * most:
            blocks.append(bytearray(biggest))
            blocks.append(bytearray(per_client - biggest))
    except MemoryError:
        pass
    room = len(blocks) // 2
    blocks = None
    gc.collect()
    return room, "MicroPython heap"


def upstream_context(b):
    """The ssl.SSLContext for bridge `b`'s upstream (a BridgeSettings), or None
    for plain TCP; ConfigError for a file mbedTLS refuses or a missing cafile."""
    if not (b.tls or b.cafile or b.certfile):
        return None
    if not b.cafile:
        raise ConfigError(
            "bridge %s: TLS to the upstream needs cafile on a board (it has no system CA store): the DER"
            " certificate of the CA the upstream's certificate chains to (tools/deploy converts PEM)" % b.name
        )
    import ssl

    from firmware.boardcfg import load_ca, load_cert_chain  # (start-up: firmware/bridge.py with_contexts)

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    load_ca(ctx, b.cafile)
    ctx.verify_mode = ssl.CERT_REQUIRED  # (this build's client default is CERT_NONE)
    if b.certfile:
        load_cert_chain(ctx, b.certfile, b.keyfile)
    return ctx


_VERIFY_FAILED = -0x2700  # MBEDTLS_ERR_X509_CERT_VERIFY_FAILED (raised so when a read ran into it)


def ended_handshake(how):
    return (
        "TLS: the upstream ended the handshake (%s; does it want a client certificate we lack, or refuse ours?)" % how
    )


def upstream_failure(e, handshaking):
    """Why a bridge's TLS connection failed (`e`: OSError or ValueError), in words."""
    if isinstance(e, ValueError):  # mbedTLS's verification result, in its words
        return "TLS: the upstream's certificate failed verification: " + " ".join(str(e).split())
    code = e.args[0] if e.args else 0
    if code == _VERIFY_FAILED:
        return "TLS: the upstream's certificate failed verification (against cafile, for the address's host)"
    if handshaking and code in PEER_ENDED:
        return ended_handshake(e.args[1] if len(e.args) > 1 else "error %s" % code)
    if len(e.args) > 1:
        return "TLS error %s (%s)" % (code, e.args[1])  # mbedTLS's code and text
    return "error %s" % e
