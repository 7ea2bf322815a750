// Translation unit that carries the precompiled torch header (see cmake/TrainerTargets.cmake).
