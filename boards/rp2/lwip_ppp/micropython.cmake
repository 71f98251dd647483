# MicroPython 1.28's lwIP under network.PPP, fixed for Siskin's rp2 images
# (included by boards/rp2/SISKIN_PICO_W and SISKIN_PICO as a user C module):
# lwip_lock.c (lwIP entered from one place at a time) and tcp_send.c (a
# queued socket write is not an error). Each wraps lwIP's or the port's
# functions with the linker's --wrap; the files say why.
add_library(usermod_siskin_lwip_ppp INTERFACE)
target_sources(usermod_siskin_lwip_ppp INTERFACE
    ${CMAKE_CURRENT_LIST_DIR}/lwip_lock.c ${CMAKE_CURRENT_LIST_DIR}/tcp_send.c)
target_link_options(usermod_siskin_lwip_ppp INTERFACE
    -Wl,--wrap=lwip_lock_acquire -Wl,--wrap=lwip_lock_release
    -Wl,--wrap=pppos_input -Wl,--wrap=sys_check_timeouts
    -Wl,--wrap=tcp_write -Wl,--wrap=tcp_output)
target_link_libraries(usermod INTERFACE usermod_siskin_lwip_ppp)
