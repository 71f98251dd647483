# Opening the store, for both shells: the opener, and the broker wired to it.
#
# A shell picks the backend (the host's POSIX log file, a board's littlefs
# file or raw flash partition) and the AEAD maker (the `cryptography`
# package, a board's cryptolib) and reads the key text; what the text means
# (keytext.py) and how the store is opened are decided in common/, once.

from common.broker.broker import Broker
from common.store.persist import Persist
from common.store.store import Store
from common.store.store_open import open_records


def open_store(backend, keys=None, make_aead=None, log=None, wipe=False, monitor=None):
    """The opened Store over `backend`; StoreError with advice if it cannot be used.

    `keys`: key id -> AES key (keytext.parse_keys, or keys derived from it), sealed
    with make_aead(key); None or empty: a plain store. The newest id
    encrypts. `wipe` discards what the store holds. `monitor` hears of the
    restore's progress (Store). The backend is closed if opening fails.
    """
    aeads = {}
    key_id = 0
    if keys:
        for kid in keys:
            aeads[kid] = make_aead(keys[kid])
            if kid > key_id:
                key_id = kid
    store = Store(backend, aeads, key_id, log)
    store.monitor = monitor
    try:
        open_records(store, wipe)
    except BaseException:
        backend.close()
        raise
    return store


def new_broker(settings, entropy, store=None):
    """The broker; with a `store`, its persistence listener writes to it
    (then call Driver.restore before serving: it runs restore.py once)."""
    if store is None:
        return Broker(settings, entropy, None)
    from common.store.restore import restore  # (start-up only: dropped after its run)

    return Broker(settings, entropy, Persist(store, restore))
