# lwIP entered from one place at a time (lwip_lock.c explains why): included
# by boards/rp2/SISKIN_PICO_W and SISKIN_PICO as a user C module.
add_library(usermod_siskin_lwip_lock INTERFACE)
target_sources(usermod_siskin_lwip_lock INTERFACE ${CMAKE_CURRENT_LIST_DIR}/lwip_lock.c)
target_link_options(usermod_siskin_lwip_lock INTERFACE
    -Wl,--wrap=lwip_lock_acquire -Wl,--wrap=lwip_lock_release
    -Wl,--wrap=pppos_input -Wl,--wrap=sys_check_timeouts)
target_link_libraries(usermod INTERFACE usermod_siskin_lwip_lock)
