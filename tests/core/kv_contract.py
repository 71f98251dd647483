# The backend contract both store backends keep (common/store/filelog.py and
# common/store/kvlog.py: get, put, delete, keys), checked the same way for each.


def items(kv, prefix=b""):
    """(key, value) of each record under `prefix`: the backends list keys (in their read
    order) and give values one get() at a time; this is the list for a test to compare."""
    out = []
    for key in kv.keys(prefix):
        value = kv.get(key)
        if value is not None:
            out.append((key, value))
    return out


def check_put_get_overwrite_delete(tc, kv):
    tc.assertIsNone(kv.get(b"a"))
    kv.put(b"a", b"1")
    kv.put(b"b", b"")
    tc.assertEqual(kv.get(b"a"), b"1")
    tc.assertEqual(kv.get(b"b"), b"")
    kv.put(b"a", b"22")
    tc.assertEqual(kv.get(b"a"), b"22")
    kv.delete(b"a")
    kv.delete(b"never")  # no error if absent
    tc.assertIsNone(kv.get(b"a"))
    tc.assertEqual(items(kv), [(b"b", b"")])


def check_items_prefix(tc, kv):
    for k in (b"s/1", b"s/2", b"r/1", b"s"):
        kv.put(k, k + b"!")
    got = items(kv, b"s/")
    got.sort()
    tc.assertEqual(got, [(b"s/1", b"s/1!"), (b"s/2", b"s/2!")])
    tc.assertEqual(len(items(kv)), 4)
