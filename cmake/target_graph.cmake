# joule_write_target_graph(out_file): the project's own targets and the joule targets each links directly, one line
# per target, for tools/check/architecture.py to hold docs/ARCHITECTURE.md's table against:
#
#   NAME|TYPE|FOLDER|dep1,dep2,...|torch|hdf5
#
# NAME is `joule` or a joule_* target defined outside tests/; FOLDER is its source directory relative to the project
# root (`.` for the root); deps are the joule targets in its LINK_LIBRARIES (not for INTERFACE libraries) and
# INTERFACE_LINK_LIBRARIES, $<LINK_ONLY:x> read as x, other generator expressions ignored, without the build
# infrastructure (joule_options: flags; joule_torch_pch: the precompiled header), sorted; torch is `yes` when the
# target itself lists an entry of TORCH_LIBRARIES or joule_torch_pch among those, else `no`; hdf5 is `yes` when it
# lists HDF5::HDF5 (the checker follows the links to say which targets reach it).
# Call it at the end of the top-level CMakeLists.txt, after every add_subdirectory and target_link_libraries.

function(_joule_target_graph_is_joule name out)
  if(name STREQUAL "joule" OR name MATCHES "^joule_")
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

# Every target defined in dir and the directories below it, tests/ left out.
function(_joule_target_graph_collect dir out)
  set(result "")
  file(RELATIVE_PATH rel "${CMAKE_SOURCE_DIR}" "${dir}")
  if(rel STREQUAL "tests" OR rel MATCHES "^tests/")
    set(${out} "" PARENT_SCOPE)
    return()
  endif()
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  list(APPEND result ${targets})
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _joule_target_graph_collect("${sub}" sub_targets)
    list(APPEND result ${sub_targets})
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

function(joule_write_target_graph out_file)
  _joule_target_graph_collect("${CMAKE_SOURCE_DIR}" all_targets)
  set(infrastructure joule_options joule_torch_pch)
  set(lines "")
  foreach(target IN LISTS all_targets)
    _joule_target_graph_is_joule("${target}" is_joule)
    if(NOT is_joule OR target IN_LIST infrastructure)
      continue()
    endif()
    get_target_property(type ${target} TYPE)
    get_target_property(source_dir ${target} SOURCE_DIR)
    file(RELATIVE_PATH folder "${CMAKE_SOURCE_DIR}" "${source_dir}")
    if(folder STREQUAL "")
      set(folder ".")
    endif()

    set(links "")
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(direct ${target} LINK_LIBRARIES)
      if(direct)
        list(APPEND links ${direct})
      endif()
    endif()
    get_target_property(interface ${target} INTERFACE_LINK_LIBRARIES)
    if(interface)
      list(APPEND links ${interface})
    endif()

    set(deps "")
    set(torch no)
    set(hdf5 no)
    foreach(item IN LISTS links)
      # target_link_libraries called from another directory wraps its items in ::@(directory-id) ... ::@
      if(item MATCHES "^::@")
        continue()
      endif()
      if(item MATCHES "^\\$<LINK_ONLY:([^<>$]+)>$")
        set(item "${CMAKE_MATCH_1}")
      elseif(item MATCHES "\\$<")
        continue()  # any other generator expression
      endif()
      if(item STREQUAL "joule_torch_pch" OR item IN_LIST TORCH_LIBRARIES)
        set(torch yes)
      endif()
      if(item STREQUAL "HDF5::HDF5")
        set(hdf5 yes)
      endif()
      if(item IN_LIST infrastructure)
        continue()
      endif()
      _joule_target_graph_is_joule("${item}" dep_is_joule)
      if(dep_is_joule)
        list(APPEND deps "${item}")
      endif()
    endforeach()
    list(REMOVE_DUPLICATES deps)
    list(SORT deps)
    list(JOIN deps "," deps_text)
    string(APPEND lines "${target}|${type}|${folder}|${deps_text}|${torch}|${hdf5}\n")
  endforeach()
  file(WRITE "${out_file}" "${lines}")
endfunction()
