# The `heap ...` line the firmware prints every heap_report seconds (0, the
# default: never, and this module is not loaded): what the tools that
# measure a board's heap read (tools/ram_serve.py, tools/fw_bench.py,
# tools/tls_ram.py, tools/emu/).

import gc


def report_heap(server, t, garbage):
    """One `heap ...` line; garbage: what this second's collection freed
    (with gc_threshold 0, all that was allocated and dropped since the
    last one: tools/fw_bench divides it by the messages)."""
    driver = server.driver
    broker = driver.broker
    st = broker.stats
    print(
        "heap t=%d free=%d alloc=%d open=%d refused=%d sent=%d received=%d dropped_qos0=%d queue_full=%d"
        " store_syncs=%d garbage=%d"
        % (
            t,
            gc.mem_free(),
            gc.mem_alloc(),
            driver.open,
            server.refused,
            st.messages_sent,
            st.messages_received,
            st.dropped_qos0,
            st.dropped_queue_full,
            broker.listener.syncs(),
            garbage,
        )
    )
