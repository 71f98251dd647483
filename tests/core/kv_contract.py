# The backend contract both store backends keep (common/store/filelog.py and
# common/store/kvlog.py: get, put, delete, items), checked the same way for each.


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
    tc.assertEqual(kv.items(), [(b"b", b"")])


def check_items_prefix(tc, kv):
    for k in (b"s/1", b"s/2", b"r/1", b"s"):
        kv.put(k, k + b"!")
    got = kv.items(b"s/")
    got.sort()
    tc.assertEqual(got, [(b"s/1", b"s/1!"), (b"s/2", b"s/2!")])
    tc.assertEqual(len(kv.items()), 4)
