# The MQTT-SN listener's settings (common/mqttsn/settings.py): the schema both
# shells check with, and the gateway's SnSettings made from it. Runs under
# MicroPython too.

import unittest

from common.broker.settings import ConfigError, check
from common.mqttsn.settings import SN_LISTENER, sn_settings


class TestSnSettings(unittest.TestCase):
    def test_defaults_and_values(self):
        values = check("t", {"gw_id": 9, "max_buffered": 5, "predefined": {"7": "plant/alarm"}}, SN_LISTENER)
        s = sn_settings("t", values, False, 3)
        self.assertEqual((s.gw_id, s.max_buffered, s.max_clients, s.max_packet_size), (9, 5, 16, 1024))
        self.assertEqual(s.predefined, {7: "plant/alarm"})
        self.assertEqual((s.loopback, s.listener_key), (False, 3))

    def test_bad_predefined_refused(self):
        for table in ({"0": "a"}, {"x": "a"}, {"65535": "a"}, {"1": "a/#"}, {"1": ""}, {"1": 5}):
            with self.assertRaises(ConfigError):
                sn_settings("t", {"predefined": table}, True, 0)

    def test_advertise_to(self):
        s = sn_settings("t", {"advertise_interval": 60, "advertise_to": "192.168.1.255:1884"}, True, 0)
        self.assertEqual((s.advertise_interval, s.advertise_to), (60, ("192.168.1.255", 1884)))
        s = sn_settings("t", {"advertise_interval": 60, "advertise_to": "[ff02::1]:1884"}, True, 0)
        self.assertEqual(s.advertise_to, ("ff02::1", 1884))
        self.assertIsNone(sn_settings("t", {"advertise_to": "x:1"}, True, 0).advertise_to)  # interval 0: off
        for bad in ("", "host", "host:0", ":1884", "h:port"):
            with self.assertRaises(ConfigError):
                sn_settings("t", {"advertise_interval": 60, "advertise_to": bad}, True, 0)

    def test_out_of_range_refused(self):
        for bad in ({"gw_id": 256}, {"max_packet_size": 8}, {"allow_remote": 1}):
            with self.assertRaises(ConfigError):
                check("t", bad, SN_LISTENER)


if __name__ == "__main__":
    unittest.main()
